-- Claims walk each queue's own due-time order, as in PostgreSQL's 0009 (ADR-0060): a
-- backlog due in one queue no longer lies across the claim walk of another. sqlite has no
-- functions: its appends bind their events as before (one transaction, BEGIN IMMEDIATE).
CREATE INDEX tasks_claimable_in_queue ON tasks (queue, claimable_at)
    WHERE claimable_at IS NOT NULL;
