-- Runs move from a WITHOUT ROWID table keyed by the random run id to an ordinary rowid table
-- (run_id stays the unique key). A random key in the table itself put every new row, inputs and
-- all, at a random place in the primary B-tree; now rows append in creation order and only the
-- small unique index on run_id takes a random insert. Measured: ~10 µs less SQL per accepted
-- agent hook with 150 000 runs stored. Nothing references runs, so a copy and a rename is enough.

CREATE TABLE runs_rowid (
    run_id       TEXT PRIMARY KEY,
    kind         TEXT NOT NULL CHECK (kind IN ('hook', 'task', 'heartbeat')),
    agent_id     TEXT NOT NULL,
    session_key  TEXT NOT NULL REFERENCES sessions (key),
    session_id   TEXT NOT NULL,
    name         TEXT NOT NULL,
    inputs       TEXT NOT NULL,  -- JSON object
    status       TEXT NOT NULL DEFAULT 'queued' CHECK (status IN
                 ('queued', 'running', 'ok', 'error', 'timed_out', 'skipped', 'lost', 'cancelled')),
    attempt      INTEGER NOT NULL DEFAULT 1,
    created_at   INTEGER NOT NULL,
    started_at   INTEGER,
    ended_at     INTEGER,
    reply        TEXT,
    error        TEXT,
    leased_by    TEXT,
    lease_until  INTEGER,
    updated_at   INTEGER NOT NULL
);

INSERT INTO runs_rowid (
    run_id, kind, agent_id, session_key, session_id, name, inputs, status, attempt,
    created_at, started_at, ended_at, reply, error, leased_by, lease_until, updated_at
)
SELECT
    run_id, kind, agent_id, session_key, session_id, name, inputs, status, attempt,
    created_at, started_at, ended_at, reply, error, leased_by, lease_until, updated_at
FROM runs ORDER BY created_at, run_id;

DROP TABLE runs;
ALTER TABLE runs_rowid RENAME TO runs;

CREATE INDEX runs_created ON runs (created_at, run_id);
CREATE INDEX runs_agent_created ON runs (agent_id, created_at);
CREATE INDEX runs_claimable ON runs (status, created_at) WHERE status IN ('queued', 'running');
