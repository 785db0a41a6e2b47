-- The delivery log (model.md §10.4): one row per reply to deliver, one row per attempt.

CREATE TABLE deliveries (
    delivery_id      TEXT PRIMARY KEY,
    run_id           TEXT NOT NULL,
    agent_id         TEXT NOT NULL,
    channel          TEXT NOT NULL,
    target           TEXT NOT NULL,
    text             TEXT NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  INTEGER,
    last_error       TEXT,
    message_ids      TEXT NOT NULL DEFAULT '[]',
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    delivered_at     INTEGER
) WITHOUT ROWID;
CREATE INDEX deliveries_run ON deliveries (run_id);
CREATE INDEX deliveries_pending ON deliveries (channel, target, created_at) WHERE status = 'pending';

CREATE TABLE delivery_attempts (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    delivery_id  TEXT NOT NULL REFERENCES deliveries (delivery_id) ON DELETE CASCADE,
    at           INTEGER NOT NULL,
    outcome      TEXT NOT NULL,
    http_status  INTEGER,
    error        TEXT
);
CREATE INDEX delivery_attempts_delivery ON delivery_attempts (delivery_id, id);
