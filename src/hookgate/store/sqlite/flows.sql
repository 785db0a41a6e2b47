-- Named fragments and statements of the SQLite FlowTx (store/sqlite/flows.py). Column lists are
-- generated from the Flow/Task records; the WHERE/ORDER clauses live here.

-- name: count_owner_flows
-- Counted up to ?2 only: the answer is "more than the threshold or not", at the same cost for any owner.
SELECT count(*) FROM (SELECT 1 FROM flows WHERE owner_key = ?1 LIMIT ?2)

-- name: where_owner_newest
WHERE owner_key = ? ORDER BY created_at DESC, seq DESC

-- name: where_owner_newest_one
WHERE owner_key = ? ORDER BY created_at DESC, seq DESC LIMIT 1

-- name: where_owner_active_newest
WHERE owner_key = ? AND status NOT IN ('succeeded', 'failed', 'cancelled', 'lost')
ORDER BY created_at DESC, seq DESC LIMIT 1

-- name: flow_task_counts
-- get_task_summary: one row per (status, runtime), not one per task.
SELECT status, runtime, count(*) FROM tasks WHERE parent_flow_id = ? GROUP BY status, runtime

-- name: where_flow_tasks_newest
WHERE parent_flow_id = ? ORDER BY created_at DESC, seq DESC

-- name: where_flow_run_id
-- a run_task retry's candidates, by the index tasks_flow_run (flows/rules.py find_retry_target picks one)
WHERE parent_flow_id = ? AND run_id = ?

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

-- Runs, transcripts and heartbeats (the embedded worker, model.md §5–§6; operations.md §4.4)

-- name: claimable_runs
-- Queued runs, and running ones whose lease expired, oldest first; runs of the same millisecond in
-- the order they were accepted (seq: runs append in creation order, and the partial index carries
-- it). Two ordered reads of the partial index runs_claimable (the repeated `status IN (…)` term is
-- what lets SQLite use it): one query with an OR walked runs_created from the oldest run ever,
-- through every finished one (9 ms per claim with 40 000 runs stored, and growing).
SELECT run_id, seq FROM (
    SELECT * FROM (SELECT run_id, created_at, seq FROM runs
                   WHERE status IN ('queued', 'running') AND status = 'queued'
                     AND (lease_until IS NULL OR lease_until < ?1)
                   ORDER BY created_at, seq LIMIT ?2)
    UNION ALL
    SELECT * FROM (SELECT run_id, created_at, seq FROM runs
                   WHERE status IN ('queued', 'running') AND status = 'running' AND lease_until < ?1
                   ORDER BY created_at, seq LIMIT ?2)
) ORDER BY created_at, seq LIMIT ?2

-- name: claim_run
-- a queued run starts its current attempt; a running one whose lease expired crashed: next attempt.
-- After attempt 2 (model.md §5.1: 1 or 2; runtime.runs.MAX_ATTEMPTS) the count goes to 3 only for
-- the worker to end the run lost without starting it: its startedAt stays attempt 2's, also when
-- such a claim was released and is claimed again (finish_run takes the count back).
UPDATE runs SET
    attempt = CASE WHEN status = 'running' THEN attempt + 1 ELSE attempt END,
    started_at = CASE WHEN (CASE WHEN status = 'running' THEN attempt + 1 ELSE attempt END) > 2
                      THEN started_at ELSE ?4 END,
    status = 'running', leased_by = ?2, lease_until = ?3, updated_at = ?4
WHERE seq = ?1  -- as claimable_runs gave it, in the same transaction

-- name: renew_run_lease
-- ?4: the seq run id ?1 stands for (get_run in queries.sql)
UPDATE runs SET lease_until = ?3
WHERE seq = coalesce((SELECT seq FROM runs WHERE seq = ?4 AND run_id = ?1),
                 (SELECT seq FROM runs WHERE run_id = ?1 AND id_from_seq = 0))
  AND run_id = ?1 AND leased_by = ?2 AND status = 'running'

-- name: release_run
-- (a claim past attempt 2 started nothing: the run keeps attempt 2's startedAt for its end)
UPDATE runs SET status = 'queued', leased_by = NULL, lease_until = NULL,
    started_at = CASE WHEN attempt > 2 THEN started_at END, updated_at = ?3
WHERE seq = coalesce((SELECT seq FROM runs WHERE seq = ?4 AND run_id = ?1),
                 (SELECT seq FROM runs WHERE run_id = ?1 AND id_from_seq = 0))
  AND run_id = ?1 AND leased_by = ?2 AND status = 'running'

-- name: set_run_started
UPDATE runs SET started_at = ?2
WHERE seq = coalesce((SELECT seq FROM runs WHERE seq = ?3 AND run_id = ?1),
                 (SELECT seq FROM runs WHERE run_id = ?1 AND id_from_seq = 0)) AND run_id = ?1

-- name: finish_run
-- The claim that found attempt 2's lease expired counted a third attempt, which never starts: the
-- run ends `lost`, or `cancelled` when its task was cancelled meanwhile, and either way the record
-- keeps attempt 2, the last one that ran (model.md §5.1: 1 or 2).
UPDATE runs SET status = ?2, reply = ?3, error = ?4, ended_at = ?5, updated_at = ?5,
    leased_by = NULL, lease_until = NULL,
    attempt = CASE WHEN attempt > 2 THEN 2 ELSE attempt END
WHERE seq = coalesce((SELECT seq FROM runs WHERE seq = ?6 AND run_id = ?1),
                 (SELECT seq FROM runs WHERE run_id = ?1 AND id_from_seq = 0)) AND run_id = ?1
  AND status IN ('queued', 'running')  -- an ended run keeps its end

-- name: append_transcript
INSERT INTO transcript_messages (session_key, session_id, role, text, run_id, created_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)

-- name: transcript_tail
SELECT role, text FROM (
    SELECT t.id, t.role, t.text FROM transcript_messages t JOIN sessions s ON s.key = t.session_key
    WHERE t.session_key = ?1 AND t.session_id = s.session_id ORDER BY t.id DESC LIMIT ?2
) ORDER BY id

-- name: session_id_of
SELECT session_id FROM sessions WHERE key = ?

-- name: heartbeat_schedule_of
SELECT due_at, last_ended_at FROM heartbeat_schedule WHERE agent_id = ?

-- name: set_heartbeat_due
-- the schedule at startup or after a reload changed the interval; a lease in progress is untouched
INSERT INTO heartbeat_schedule (agent_id, due_at, updated_at) VALUES (?1, ?2, ?3)
ON CONFLICT (agent_id) DO UPDATE SET due_at = excluded.due_at, updated_at = excluded.updated_at

-- name: renew_heartbeat_lease
UPDATE heartbeat_schedule SET lease_until = ?3 WHERE agent_id = ?1 AND leased_by = ?2

-- name: release_heartbeat
UPDATE heartbeat_schedule SET leased_by = NULL, lease_until = NULL WHERE agent_id = ?1 AND leased_by = ?2

-- name: due_heartbeats
SELECT agent_id FROM heartbeat_schedule
WHERE due_at IS NOT NULL AND due_at <= ?1 AND (leased_by IS NULL OR lease_until < ?1)
ORDER BY due_at

-- name: claim_heartbeat
UPDATE heartbeat_schedule SET leased_by = ?2, lease_until = ?3, updated_at = ?4 WHERE agent_id = ?1

-- name: finish_heartbeat
UPDATE heartbeat_schedule SET leased_by = NULL, lease_until = NULL, due_at = ?2, last_ended_at = ?3,
    updated_at = ?3
WHERE agent_id = ?1

-- name: rewind_run_leases
-- The wall clock stepped back by ?2 ms (0: this process starts, after a step it did not see); ?1 is
-- now. A lease ends at most a lease's length from now (?3): one written before the step is cut to
-- that (at most a lease late), one renewed since (on the new clock already) is left alone.
UPDATE runs SET lease_until = ?3
WHERE status IN ('queued', 'running') AND status = 'running' AND lease_until > ?3

-- name: rewind_delivery_times
-- A retry time still ahead moves ?2 earlier, within now and now + the longest retry wait (?4): it
-- waits what it had left. (One written between the step and the tick that saw it was on the new
-- clock already: it falls due at once, early rather than late.) Its lease as a run's.
UPDATE deliveries SET
    next_attempt_at = CASE WHEN next_attempt_at > ?1 THEN max(?1, min(next_attempt_at - ?2, ?4))
                           ELSE next_attempt_at END,
    lease_until = CASE WHEN lease_until > ?3 THEN ?3 ELSE lease_until END
WHERE status = 'pending' AND (next_attempt_at > ?1 OR lease_until > ?3)

-- name: rewind_heartbeat_lease
UPDATE heartbeat_schedule SET lease_until = ?3 WHERE lease_until > ?3

-- name: rewind_heartbeat_due
-- the agent's next turn as a retry time, within now and now + its interval (?3; a second when a
-- wake asked for a turn)
UPDATE heartbeat_schedule SET due_at = max(?1, min(due_at - ?2, ?3)) WHERE agent_id = ?4 AND due_at > ?1

-- name: consume_heartbeat_requests
-- the requests the turn answered: those pending when it read its events (ids up to ?2), not every
-- one created before it started (a wake's commit can land after the turn's read)
UPDATE heartbeat_requests SET consumed = 1, consumed_at = ?3
WHERE agent_id = ?1 AND consumed = 0 AND id <= ?2

-- name: last_pending_heartbeat_request
SELECT coalesce(max(id), 0) FROM heartbeat_requests WHERE agent_id = ? AND consumed = 0

-- name: pending_events_of
SELECT seq, created_at, text FROM system_events WHERE session_key = ? AND status = 'pending' ORDER BY seq

-- name: consume_event
-- only while pending: an event the queue cap dropped while the turn ran stays dropped
UPDATE system_events SET status = 'consumed', consumed_by_run_id = ?2, updated_at = ?3
WHERE seq = ?1 AND status = 'pending'

-- name: fail_event
UPDATE system_events SET failed_turns = failed_turns + 1,
    status = CASE WHEN failed_turns + 1 >= ?2 THEN 'dropped' ELSE 'pending' END, updated_at = ?3
WHERE seq = ?1 AND status = 'pending'
RETURNING status

-- name: queued_run_count
SELECT count(*) FROM runs WHERE status IN ('queued', 'running') AND status = 'queued'  -- via runs_claimable

-- name: set_last_route
UPDATE sessions SET last_channel = ?2, last_to = ?3, updated_at = ?4 WHERE key = ?1

-- name: last_route
SELECT last_channel, last_to FROM sessions WHERE key = ?

-- name: run_transcript
SELECT role, text FROM transcript_messages WHERE run_id = ? ORDER BY id

-- name: insert_delivery
INSERT INTO deliveries (delivery_id, run_id, agent_id, channel, target, text, status, attempts, last_error,
                        created_at, updated_at, delivered_at, next_attempt_at, seq)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, CASE WHEN ?7 = 'delivered' THEN ?10 END,
        CASE WHEN ?7 = 'pending' THEN ?10 END, (SELECT coalesce(max(seq), 0) + 1 FROM deliveries))

-- name: claimable_deliveries
-- The head of each (channel, target) queue when it is due and not leased, while no other delivery
-- of its target is leased: a delivery that waits for a retry holds back the later ones for its
-- target only, and one in flight every other (operations.md §4.4) — a replayed dead delivery keeps
-- its older seq, so it heads its queue again while a later one may be in flight. At most ?3 of one
-- channel, less what this worker has in flight there (?4: a JSON object channel → count), so one
-- slow chat API cannot take every delivery slot.
SELECT delivery_id, channel FROM (
    SELECT d.delivery_id, d.channel, d.next_attempt_at, d.seq,
           row_number() OVER (PARTITION BY d.channel ORDER BY d.next_attempt_at, d.seq) AS nth
    FROM deliveries AS d
    WHERE d.status = 'pending' AND d.next_attempt_at <= ?1 AND (d.lease_until IS NULL OR d.lease_until <= ?1)
      AND NOT EXISTS (SELECT 1 FROM deliveries AS e
                      WHERE e.status = 'pending' AND e.channel = d.channel AND e.target = d.target
                        AND (e.seq < d.seq OR (e.lease_until > ?1 AND e.seq <> d.seq)))
)
WHERE nth <= ?3 - coalesce(json_extract(?4, '$."' || channel || '"'), 0)
ORDER BY next_attempt_at, seq
LIMIT ?2

-- name: claim_delivery
UPDATE deliveries SET leased_by = ?2, lease_until = ?3 WHERE delivery_id = ?1

-- name: renew_delivery_lease
UPDATE deliveries SET lease_until = ?3 WHERE delivery_id = ?1 AND leased_by = ?2 AND status = 'pending'

-- name: release_delivery
UPDATE deliveries SET leased_by = NULL, lease_until = NULL WHERE delivery_id = ?1 AND leased_by = ?2

-- name: get_delivery
SELECT delivery_id, run_id, agent_id, channel, target, text, status, attempts, parts_sent,
       message_ids, created_at, next_attempt_at, last_error, leased_by
FROM deliveries WHERE delivery_id = ?

-- name: delivery_run
-- What a delivery job shows of its run (?1 the run id, ?2 its seq: get_run in queries.sql)
SELECT kind, name, session_key, inputs FROM runs
WHERE seq = coalesce((SELECT seq FROM runs WHERE seq = ?2 AND run_id = ?1),
                 (SELECT seq FROM runs WHERE run_id = ?1 AND id_from_seq = 0)) AND run_id = ?1

-- name: delivery_part_sent
UPDATE deliveries SET parts_sent = ?2, message_ids = json_insert(message_ids, '$[#]', ?3), updated_at = ?4
WHERE delivery_id = ?1

-- name: finish_delivery_attempt
UPDATE deliveries SET status = ?2, attempts = attempts + 1, next_attempt_at = ?3, last_error = ?4,
    updated_at = ?5, delivered_at = CASE WHEN ?2 = 'delivered' THEN ?5 END, leased_by = NULL, lease_until = NULL
WHERE delivery_id = ?1

-- name: requeue_delivery
UPDATE deliveries SET status = 'pending', attempts = 0, next_attempt_at = ?2, last_error = NULL,
    leased_by = NULL, lease_until = NULL, updated_at = ?2
WHERE delivery_id = ?1 AND status = 'dead'

-- name: due_delivery_count
-- the backlog gauge (operations.md §3: due jobs not yet claimed); one waiting out a backoff is not due
SELECT count(*) FROM deliveries
WHERE status = 'pending' AND next_attempt_at <= ?1 AND (leased_by IS NULL OR lease_until <= ?1)

-- name: next_job_due
-- The next time a delivery retry or a heartbeat turn falls due, after now (?1). What is due already
-- but was not claimed waits behind a job in flight (the head of its target's queue, a full pool):
-- the job's end wakes the worker. Counting it here had the worker tick without pause (a write
-- transaction each) for as long as a delivery to the same target was in flight.
SELECT min(due) FROM (
    SELECT min(next_attempt_at) AS due FROM deliveries WHERE status = 'pending' AND next_attempt_at > ?1
    UNION ALL
    SELECT min(due_at) FROM heartbeat_schedule WHERE due_at > ?1
)

-- name: delete_finished_deliveries
DELETE FROM deliveries WHERE status <> 'pending' AND updated_at <= ?

-- name: insert_delivery_attempt
INSERT INTO delivery_attempts (delivery_id, at, outcome, http_status, error) VALUES (?1, ?2, ?3, ?4, ?5)

-- name: run_deliveries
SELECT delivery_id, channel, target, status, attempts, last_error, created_at, delivered_at, next_attempt_at,
       parts_sent, message_ids
FROM deliveries WHERE run_id = ? ORDER BY seq

-- name: delivery_attempts_of
SELECT at, outcome, http_status, error FROM delivery_attempts WHERE delivery_id = ? ORDER BY id

-- name: id_key
SELECT key FROM store_keys WHERE name = ?

-- name: insert_id_key
INSERT OR IGNORE INTO store_keys (name, key) VALUES (?, ?)

-- name: where_flow_seq_owned
WHERE seq = ? AND flow_id = ? AND owner_key = ?

-- name: where_flow_random_owned
WHERE flow_id = ? AND id_from_seq = 0 AND owner_key = ?

-- name: where_flow_seq
WHERE seq = ? AND flow_id = ?

-- name: where_flow_random
WHERE flow_id = ? AND id_from_seq = 0
