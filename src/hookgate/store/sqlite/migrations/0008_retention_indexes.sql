-- Retention of consumed or dropped events and consumed wake requests (storage.retention.eventDays,
-- operations.md §4.1): the sweeper deletes the oldest of them in small batches, and these partial
-- indexes find them without reading the table. A row enters them only when it stops being pending
-- (a heartbeat turn consumes it, or the queue cap drops it), never on the wake's insert.
-- Terminal runs (runDays) are found through runs_created: a run ends after it was created.

CREATE INDEX system_events_finished ON system_events (updated_at) WHERE status <> 'pending';
CREATE INDEX heartbeat_requests_consumed ON heartbeat_requests (consumed_at) WHERE consumed = 1;
