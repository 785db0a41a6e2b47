-- Named statements of the SQLite backend, loaded once by hookgate.store.sqlite.queries.
-- Each block starts with `-- name: <name>` and holds one statement; parameters are positional
-- (`?`) or numbered (`?1`) as the caller passes them.

-- name: create_schema_migrations
CREATE TABLE IF NOT EXISTS schema_migrations (
    version     INTEGER PRIMARY KEY,
    name        TEXT NOT NULL,
    applied_at  INTEGER NOT NULL
);

-- name: has_schema_migrations
SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations';

-- name: schema_version
SELECT coalesce(max(version), 0) FROM schema_migrations;

-- name: record_migration
INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?);

-- name: select_one
SELECT 1;

-- name: probe_write
-- A write that changes nothing, so ping() can tell whether the database accepts commits again.
UPDATE schema_migrations SET applied_at = applied_at
WHERE version = (SELECT max(version) FROM schema_migrations);

-- name: session_exists
SELECT 1 FROM sessions WHERE key = ?;

-- name: insert_session
INSERT INTO sessions (key, agent_id, session_id, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?4);

-- name: start_session_transcript
-- an isolated run starts a new transcript: the record points at it (model.md §3)
INSERT INTO sessions (key, agent_id, session_id, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?4)
ON CONFLICT (key) DO UPDATE SET session_id = excluded.session_id, updated_at = excluded.updated_at;

-- name: get_session
SELECT key, agent_id, session_id, spawned_by, last_channel, last_to, created_at, updated_at
FROM sessions WHERE key = ?;

-- name: pending_queue
-- A session's pending events (their seqs joined by commas, in no set order) and the newest one's text;
-- then the reason and time of agent ?2's newest pending wake request (see _record_wake): what
-- SqliteStore keeps as its queue view. One statement and one row: each statement and each row cost a
-- round trip through the sqlite3 module.
SELECT
    (SELECT group_concat(seq) FROM system_events WHERE session_key = ?1 AND status = 'pending'),
    (SELECT text FROM system_events WHERE session_key = ?1 AND status = 'pending' ORDER BY seq DESC LIMIT 1),
    (SELECT reason FROM heartbeat_requests WHERE agent_id = ?2 AND consumed = 0 ORDER BY id DESC LIMIT 1),
    (SELECT created_at FROM heartbeat_requests WHERE agent_id = ?2 AND consumed = 0 ORDER BY id DESC LIMIT 1);

-- name: insert_event
INSERT INTO system_events (session_key, text, created_at, status, updated_at)
VALUES (?1, ?2, ?3, 'pending', ?3);

-- name: drop_event
-- The usual case of the cap: one event over it, the oldest pending one (by its seq) is dropped.
UPDATE system_events SET status = 'dropped', updated_at = ?2 WHERE seq = ?1;

-- name: drop_excess_pending_events
-- ?2 = how many pending events a session keeps; older ones become `dropped`.
UPDATE system_events SET status = 'dropped', updated_at = ?3
WHERE status = 'pending' AND seq IN (
    SELECT seq FROM system_events
    WHERE session_key = ?1 AND status = 'pending'
    ORDER BY seq DESC LIMIT -1 OFFSET ?2
);

-- name: insert_heartbeat_request
INSERT INTO heartbeat_requests (agent_id, reason, created_at) VALUES (?1, ?2, ?3);

-- name: pull_heartbeat_due
-- due = min(current due, ?2); a missing row or a NULL due time takes ?2.
INSERT INTO heartbeat_schedule (agent_id, due_at, updated_at) VALUES (?1, ?2, ?3)
ON CONFLICT (agent_id) DO UPDATE SET
    due_at = CASE WHEN due_at IS NULL OR excluded.due_at < due_at THEN excluded.due_at ELSE due_at END,
    updated_at = excluded.updated_at;

-- name: count_pending_heartbeat_requests
SELECT count(*) FROM heartbeat_requests WHERE agent_id = ? AND consumed = 0;

-- name: get_heartbeat_schedule
SELECT agent_id, due_at, leased_by, lease_until, last_ended_at, updated_at
FROM heartbeat_schedule WHERE agent_id = ?;

-- name: claim_hook_idempotency
-- Inserts the record, or takes over an expired one; 0 rows changed = a live record exists.
INSERT INTO hook_idempotency (record_key, run_id, created_at, expires_at) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (record_key) DO UPDATE SET
    run_id = excluded.run_id, created_at = excluded.created_at, expires_at = excluded.expires_at
WHERE hook_idempotency.expires_at <= excluded.created_at;

-- name: get_hook_idempotency_run
SELECT run_id FROM hook_idempotency WHERE record_key = ?;

-- name: find_live_hook_idempotency
SELECT run_id FROM hook_idempotency WHERE record_key = ? AND expires_at > ?;

-- name: sweep_hook_idempotency
DELETE FROM hook_idempotency WHERE expires_at <= ?;

-- name: insert_run
-- A run whose id another scheme made (a heartbeat turn's, made before its row): seq from
-- AUTOINCREMENT, found through the partial unique index runs_random_id.
INSERT INTO runs (run_id, kind, agent_id, session_key, session_id, name, inputs, status, attempt,
                  created_at, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'queued', 1, ?8, ?8);

-- name: insert_run_by_seq
-- A run whose id was made from its seq ?9 (seqids.py): in no index by id.
INSERT INTO runs (run_id, kind, agent_id, session_key, session_id, name, inputs, status, attempt,
                  created_at, updated_at, seq, id_from_seq)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'queued', 1, ?8, ?8, ?9, 1);

-- name: next_seq
-- The seq AUTOINCREMENT would give table ?1's next row.
SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = ?1), 0) + 1;

-- name: get_run
-- A run by id (?1) and the seq the id stands for (?2, NULL when no seq does: SqliteStore.run_seq).
-- Every lookup by run id has this form, as flows' lookups do: by seq first (a primary-key read that
-- also compares the id), and only when that finds nothing through runs_random_id, the index of
-- random ids (runs stored before migration 11, heartbeat turns).
SELECT run_id, kind, agent_id, session_key, session_id, name, inputs, status, attempt, created_at,
       started_at, ended_at, reply, error, leased_by, lease_until, updated_at
FROM runs
WHERE seq = coalesce((SELECT seq FROM runs WHERE seq = ?2 AND run_id = ?1),
                 (SELECT seq FROM runs WHERE run_id = ?1 AND id_from_seq = 0)) AND run_id = ?1;

-- name: list_runs
-- ?1 agent or NULL, ?2 kind or NULL, ?3 JSON array of statuses or NULL, ?4 since or NULL, ?5 limit.
SELECT run_id, kind, agent_id, session_key, session_id, name, inputs, status, attempt, created_at,
       started_at, ended_at, reply, error, leased_by, lease_until, updated_at
FROM runs
WHERE (?1 IS NULL OR agent_id = ?1)
  AND (?2 IS NULL OR kind = ?2)
  AND (?3 IS NULL OR status IN (SELECT value FROM json_each(?3)))
  AND (?4 IS NULL OR created_at >= ?4)
ORDER BY created_at DESC, seq DESC
LIMIT ?5;

-- name: list_events
-- ?1 agent or NULL, ?2 status or NULL (all), ?3 limit.
SELECT e.seq, e.session_key, s.agent_id, e.text, e.created_at, e.status, e.failed_turns,
       e.consumed_by_run_id
FROM system_events AS e JOIN sessions AS s ON s.key = e.session_key
WHERE (?1 IS NULL OR s.agent_id = ?1)
  AND (?2 IS NULL OR e.status = ?2)
ORDER BY e.seq DESC
LIMIT ?3;

-- name: old_terminal_runs
-- terminal runs that ended before ?1 (an end time never precedes the creation time, so the
-- runs_created range bounds the scan), except runs whose reply still waits to be delivered
SELECT seq, run_id, kind, session_id FROM runs
WHERE created_at < ?1 AND status <> 'queued' AND status <> 'running' AND coalesce(ended_at, updated_at) < ?1
  AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.run_id = runs.run_id AND d.status = 'pending')
ORDER BY created_at LIMIT ?2;

-- name: delete_run
DELETE FROM runs WHERE seq = ?;

-- name: delete_run_transcript
DELETE FROM transcript_messages WHERE run_id = ?1 AND session_id = ?2;

-- name: delete_old_events
DELETE FROM system_events WHERE seq IN (
    SELECT seq FROM system_events WHERE status <> 'pending' AND updated_at < ?1 ORDER BY updated_at LIMIT ?2);

-- name: delete_old_wake_requests
DELETE FROM heartbeat_requests WHERE id IN (
    SELECT id FROM heartbeat_requests WHERE consumed = 1 AND consumed_at < ?1 ORDER BY consumed_at LIMIT ?2);
