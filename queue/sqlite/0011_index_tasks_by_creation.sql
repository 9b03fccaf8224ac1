-- The task list an operator pages through (`noeta web`, ADR-0070): newest first, by
-- (created_at, id), one keyset page at a time. created_at never changes after the
-- insert, so the index costs only one entry per created task.
CREATE INDEX tasks_by_creation ON tasks (created_at, id);
