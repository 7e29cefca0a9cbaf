-- Aggregated settlement: a node bills its spooled data-plane usage as
-- totals per lease and per account's overage, and moves its export mark
-- in the same transaction. Exactly once comes from the mark, not from an
-- event-id index.

-- One row per node (its --node-id): the last spool sequence its
-- settlements covered. A node that never settled has no row (mark 0).
CREATE TABLE export_marks (
    node       text COLLATE "C" PRIMARY KEY CHECK (octet_length(node) BETWEEN 1 AND 256),
    mark       bigint NOT NULL CHECK (mark >= 0),
    settled_at bigint NOT NULL
);

-- usage_totals.events counts ingested events and the billed events a
-- settlement's history names; a settlement whose history is not given
-- adds units without events.
ALTER TABLE usage_totals DROP CONSTRAINT usage_totals_events_check;
ALTER TABLE usage_totals ADD CONSTRAINT usage_totals_events_check CHECK (events >= 0);
