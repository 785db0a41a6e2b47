-- Run ids become a keyed permutation of the run's seq, as flow ids did in migration 10
-- (store/sqlite/seqids.py, its own key 'run_ids' in store_keys): a lookup by id inverts it and reads
-- the row by its primary key, so a new run no longer writes a random leaf of a unique index on
-- run_id. The table is rebuilt with an AUTOINCREMENT seq (a plain rowid can be given again once the
-- newest row is deleted, and a run id must never come back). Runs stored before keep their random
-- ids (id_from_seq = 0) and a partial unique index finds them, as it finds the runs that are given a
-- random id later (a heartbeat turn's id exists before its run row is written).
--
-- runs_created no longer carries run_id: an index entry ends with the row's seq, so (created_at)
-- alone orders runs by creation time, then by the order they were accepted, with smaller entries.
--
-- No table references runs by a foreign key (tasks, deliveries, transcripts and idempotency
-- records hold run_id as plain text). seq takes the old rowid, so claim order is unchanged.

CREATE TABLE runs_by_seq (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id       TEXT NOT NULL,
    kind         TEXT NOT NULL CHECK (kind = 'hook' OR kind = 'task' OR kind = 'heartbeat'),
    agent_id     TEXT NOT NULL,
    session_key  TEXT NOT NULL REFERENCES sessions (key),
    session_id   TEXT NOT NULL,
    name         TEXT NOT NULL,
    inputs       TEXT NOT NULL,  -- JSON object
    status       TEXT NOT NULL DEFAULT 'queued' CHECK (
                     status = 'queued' OR status = 'running' OR status = 'ok' OR status = 'error'
                     OR status = 'timed_out' OR status = 'skipped' OR status = 'lost' OR status = 'cancelled'),
    attempt      INTEGER NOT NULL DEFAULT 1,
    created_at   INTEGER NOT NULL,
    started_at   INTEGER,
    ended_at     INTEGER,
    reply        TEXT,
    error        TEXT,
    leased_by    TEXT,
    lease_until  INTEGER,
    updated_at   INTEGER NOT NULL,
    id_from_seq  INTEGER NOT NULL DEFAULT 0 CHECK (id_from_seq = 0 OR id_from_seq = 1)
);

INSERT INTO runs_by_seq (
    seq, run_id, kind, agent_id, session_key, session_id, name, inputs, status, attempt,
    created_at, started_at, ended_at, reply, error, leased_by, lease_until, updated_at, id_from_seq
)
SELECT
    rowid, run_id, kind, agent_id, session_key, session_id, name, inputs, status, attempt,
    created_at, started_at, ended_at, reply, error, leased_by, lease_until, updated_at, 0
FROM runs ORDER BY rowid;

DROP TABLE runs;
ALTER TABLE runs_by_seq RENAME TO runs;

CREATE UNIQUE INDEX runs_random_id ON runs (run_id) WHERE id_from_seq = 0;
CREATE INDEX runs_created ON runs (created_at);
CREATE INDEX runs_agent_created ON runs (agent_id, created_at);
CREATE INDEX runs_claimable ON runs (status, created_at) WHERE status IN ('queued', 'running');
