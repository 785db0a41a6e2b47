-- Flow ids become a keyed permutation of the flow's seq (store/sqlite/flowids.py): a lookup by id
-- inverts it and reads the row by its primary key, so new flows no longer write a random leaf of a
-- unique index on flow_id. The table is rebuilt without that constraint. Flows stored before keep
-- their random ids (id_from_seq = 0) and a partial unique index finds them; new flows set
-- id_from_seq = 1 and are in no index by id. The key is drawn by hookgate (Python's secrets module)
-- when it first opens the database, into store_keys.
--
-- No table references flows by a foreign key (tasks hold parent_flow_id as plain text).

CREATE TABLE store_keys (
    name  TEXT PRIMARY KEY,
    key   BLOB NOT NULL
);

CREATE TABLE flows_by_seq (
    seq                  INTEGER PRIMARY KEY AUTOINCREMENT,  -- creation sequence: the "newest" tie-break
    flow_id              TEXT NOT NULL,
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
    created_by_route     TEXT,
    id_from_seq          INTEGER NOT NULL DEFAULT 0 CHECK (id_from_seq IN (0, 1))
);

INSERT INTO flows_by_seq (seq, flow_id, owner_key, sync_mode, controller_id, revision, status, notify_policy, goal,
                          current_step, blocked_task_id, blocked_summary, state_json, wait_json,
                          cancel_requested_at, created_at, updated_at, ended_at, created_by_route, id_from_seq)
SELECT seq, flow_id, owner_key, sync_mode, controller_id, revision, status, notify_policy, goal,
       current_step, blocked_task_id, blocked_summary, state_json, wait_json,
       cancel_requested_at, created_at, updated_at, ended_at, created_by_route, 0
FROM flows ORDER BY seq;

-- A seq is never given twice, even after its flow was deleted: carry the old table's high-water mark.
DELETE FROM sqlite_sequence WHERE name = 'flows_by_seq';
INSERT INTO sqlite_sequence (name, seq) SELECT 'flows_by_seq', seq FROM sqlite_sequence WHERE name = 'flows';

DROP TABLE flows;
ALTER TABLE flows_by_seq RENAME TO flows;

CREATE UNIQUE INDEX flows_random_id ON flows (flow_id) WHERE id_from_seq = 0;
CREATE INDEX flows_owner_newest ON flows (owner_key, created_at DESC, seq DESC);
CREATE INDEX flows_ended ON flows (ended_at) WHERE ended_at IS NOT NULL;
