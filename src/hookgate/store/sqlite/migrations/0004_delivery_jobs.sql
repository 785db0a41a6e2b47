-- Deliveries become durable jobs (model.md §10.4, operations.md §4.4): a creation sequence for
-- per-target ordering, a lease like runs, and how many parts of a split text were already sent.

ALTER TABLE deliveries ADD COLUMN seq INTEGER;
ALTER TABLE deliveries ADD COLUMN parts_sent INTEGER NOT NULL DEFAULT 0;
ALTER TABLE deliveries ADD COLUMN leased_by TEXT;
ALTER TABLE deliveries ADD COLUMN lease_until INTEGER;

UPDATE deliveries SET seq = (
    SELECT n FROM (SELECT delivery_id AS id, row_number() OVER (ORDER BY created_at, delivery_id) AS n
                   FROM deliveries) AS ordered
    WHERE ordered.id = deliveries.delivery_id
);

DROP INDEX deliveries_pending;
CREATE UNIQUE INDEX deliveries_seq ON deliveries (seq);
-- the head of each (channel, target) queue, and the claim scan
CREATE INDEX deliveries_pending ON deliveries (channel, target, seq) WHERE status = 'pending';
CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX deliveries_dead ON deliveries (updated_at) WHERE status = 'dead';
CREATE INDEX deliveries_finished ON deliveries (updated_at) WHERE status <> 'pending';
