-- TaskFlows, their tasks and Surface A idempotency records (model.md §1–§2, webhooks.md §3.5).
-- JSON columns hold msgspec-encoded JSON text; SQL NULL means "absent" (JSON null is the text 'null').

CREATE TABLE flows (
    seq                  INTEGER PRIMARY KEY AUTOINCREMENT,  -- creation sequence: the "newest" tie-break
    flow_id              TEXT NOT NULL UNIQUE,
    owner_key            TEXT NOT NULL,
    sync_mode            TEXT NOT NULL,
    controller_id        TEXT,
    revision             INTEGER NOT NULL,
    status               TEXT NOT NULL,
    notify_policy        TEXT NOT NULL,
    goal                 TEXT NOT NULL,
    current_step         TEXT,
    blocked_task_id      TEXT,
    blocked_summary      TEXT,
    state_json           TEXT,
    wait_json            TEXT,
    cancel_requested_at  INTEGER,
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL,
    ended_at             INTEGER,
    created_by_route     TEXT
);
CREATE INDEX flows_owner_newest ON flows (owner_key, created_at DESC, seq DESC);
CREATE INDEX flows_ended ON flows (ended_at) WHERE ended_at IS NOT NULL;

CREATE TABLE tasks (
    seq                    INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id                TEXT NOT NULL UNIQUE,
    parent_flow_id         TEXT,
    runtime                TEXT NOT NULL,
    owner_key              TEXT NOT NULL,
    requester_session_key  TEXT NOT NULL,
    scope_kind             TEXT NOT NULL,
    source_id              TEXT,
    parent_task_id         TEXT,
    label                  TEXT,
    run_id                 TEXT,
    child_session_key      TEXT,
    agent_id               TEXT,
    task                   TEXT NOT NULL,
    status                 TEXT NOT NULL,
    delivery_status        TEXT NOT NULL,
    notify_policy          TEXT NOT NULL,
    progress_summary       TEXT,
    terminal_summary       TEXT,
    error                  TEXT,
    terminal_outcome       TEXT,
    created_at             INTEGER NOT NULL,
    started_at             INTEGER,
    last_event_at          INTEGER,
    ended_at               INTEGER,
    cleanup_after          INTEGER,
    executed               INTEGER NOT NULL DEFAULT 0,
    run_ref                TEXT,
    notified_states        TEXT NOT NULL DEFAULT '[]',
    requester_agent_id     TEXT,
    task_kind              TEXT,
    metadata               TEXT
);
CREATE INDEX tasks_flow_newest ON tasks (parent_flow_id, created_at DESC, seq DESC);
CREATE INDEX tasks_flow_run ON tasks (parent_flow_id, run_id) WHERE run_id IS NOT NULL;
CREATE INDEX tasks_cleanup ON tasks (cleanup_after) WHERE cleanup_after IS NOT NULL;

CREATE TABLE webhook_idempotency (
    route_id     TEXT NOT NULL,
    idem_key     TEXT NOT NULL,
    body_sha256  TEXT NOT NULL,
    status       INTEGER NOT NULL,
    body         BLOB NOT NULL,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    PRIMARY KEY (route_id, idem_key)
) WITHOUT ROWID;
CREATE INDEX webhook_idempotency_expires ON webhook_idempotency (expires_at);
