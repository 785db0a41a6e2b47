-- hookgate SQLite schema, version 1: sessions, system events, heartbeats, runs, hook idempotency,
-- transcripts (operations.md §4.6). Flows, tasks and deliveries arrive in later migrations.
-- The runner wraps each file in one transaction and records it in schema_migrations.

CREATE TABLE sessions (
    key           TEXT PRIMARY KEY,
    agent_id      TEXT NOT NULL,
    session_id    TEXT NOT NULL,
    spawned_by    TEXT,
    last_channel  TEXT,
    last_to       TEXT,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX sessions_agent ON sessions (agent_id);
CREATE INDEX sessions_spawned_by ON sessions (spawned_by) WHERE spawned_by IS NOT NULL;

CREATE TABLE system_events (
    seq                 INTEGER PRIMARY KEY AUTOINCREMENT,
    session_key         TEXT NOT NULL REFERENCES sessions (key) ON DELETE CASCADE,
    text                TEXT NOT NULL,
    created_at          INTEGER NOT NULL,
    status              TEXT NOT NULL DEFAULT 'pending'
                        CHECK (status IN ('pending', 'consumed', 'dropped')),
    failed_turns        INTEGER NOT NULL DEFAULT 0,
    consumed_by_run_id  TEXT,
    updated_at          INTEGER NOT NULL
);
-- Only pending events are looked up by session on the hot path; one partial index keeps appends cheap.
CREATE INDEX system_events_pending ON system_events (session_key, seq) WHERE status = 'pending';

CREATE TABLE heartbeat_schedule (
    agent_id       TEXT PRIMARY KEY,
    due_at         INTEGER,
    leased_by      TEXT,
    lease_until    INTEGER,
    last_ended_at  INTEGER,
    updated_at     INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX heartbeat_schedule_due ON heartbeat_schedule (due_at) WHERE due_at IS NOT NULL;

CREATE TABLE heartbeat_requests (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_id     TEXT NOT NULL,
    reason       TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    consumed     INTEGER NOT NULL DEFAULT 0 CHECK (consumed IN (0, 1)),
    consumed_at  INTEGER
);
CREATE INDEX heartbeat_requests_pending ON heartbeat_requests (agent_id, id) WHERE consumed = 0;

CREATE TABLE runs (
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
) WITHOUT ROWID;
CREATE INDEX runs_created ON runs (created_at, run_id);
CREATE INDEX runs_agent_created ON runs (agent_id, created_at);
CREATE INDEX runs_claimable ON runs (status, created_at) WHERE status IN ('queued', 'running');

CREATE TABLE hook_idempotency (
    record_key  TEXT PRIMARY KEY,
    run_id      TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX hook_idempotency_expires ON hook_idempotency (expires_at);

CREATE TABLE transcript_messages (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,  -- the sequence
    session_key  TEXT NOT NULL REFERENCES sessions (key) ON DELETE CASCADE,
    session_id   TEXT NOT NULL,
    role         TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
    text         TEXT NOT NULL,
    run_id       TEXT,
    created_at   INTEGER NOT NULL
);
CREATE INDEX transcript_messages_session ON transcript_messages (session_id, id);
CREATE INDEX transcript_messages_run ON transcript_messages (run_id) WHERE run_id IS NOT NULL;
