-- Named fragments and statements of the SQLite FlowTx (store/sqlite/flows.py). Column lists are
-- generated from the Flow/Task records; the WHERE/ORDER clauses live here.

-- name: where_flow_owned
WHERE flow_id = ? AND owner_key = ?

-- name: where_owner_newest
WHERE owner_key = ? ORDER BY created_at DESC, seq DESC

-- name: where_owner_newest_one
WHERE owner_key = ? ORDER BY created_at DESC, seq DESC LIMIT 1

-- name: where_owner_active_newest
WHERE owner_key = ? AND status NOT IN ('succeeded', 'failed', 'cancelled', 'lost')
ORDER BY created_at DESC, seq DESC LIMIT 1

-- name: where_flow_tasks_newest
WHERE parent_flow_id = ? ORDER BY created_at DESC, seq DESC

-- name: where_retry_candidates
WHERE parent_flow_id = ?1 AND run_id = ?2 AND runtime = ?3 AND owner_key = ?4
  AND child_session_key IS ?5
ORDER BY created_at ASC, seq ASC

-- name: session_parent
SELECT spawned_by FROM sessions WHERE key = ?

-- name: insert_child_session
INSERT INTO sessions (key, agent_id, session_id, spawned_by, created_at, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?5)

-- name: get_webhook_response
SELECT body_sha256, status, body FROM webhook_idempotency
WHERE route_id = ? AND idem_key = ? AND expires_at > ?

-- name: put_webhook_response
INSERT INTO webhook_idempotency (route_id, idem_key, body_sha256, status, body, created_at, expires_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
ON CONFLICT (route_id, idem_key) DO UPDATE SET
    body_sha256 = excluded.body_sha256, status = excluded.status, body = excluded.body,
    created_at = excluded.created_at, expires_at = excluded.expires_at

-- name: sweep_webhook_idempotency
DELETE FROM webhook_idempotency WHERE expires_at <= ?

-- name: delete_expired_tasks
DELETE FROM tasks
WHERE cleanup_after IS NOT NULL AND cleanup_after <= ?
  AND status IN ('succeeded', 'failed', 'timed_out', 'cancelled', 'lost')

-- name: delete_ended_flows
DELETE FROM flows
WHERE ended_at IS NOT NULL AND ended_at < ?
  AND status IN ('succeeded', 'failed', 'cancelled', 'lost')
  AND NOT EXISTS (SELECT 1 FROM tasks WHERE tasks.parent_flow_id = flows.flow_id)
