-- The task list an operator pages through (`noeta web`, ADR-0070): newest first, by
-- (created_at, id), one keyset page at a time. Without this index every page sorts the
-- whole table; with it the first page of a million tasks reads one page of the index.
-- created_at never changes after the insert, so the index costs nothing on claims,
-- appends or status changes: only one entry per created task.
CREATE INDEX tasks_by_creation ON tasks (created_at, id);
