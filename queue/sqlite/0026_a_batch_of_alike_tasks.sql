-- The PostgreSQL twin adds noeta_create_tasks_alike, a batch of tasks that differ only in
-- their id and one event (enqueue_many), sent with their shared parts once. sqlite has no
-- functions: its store writes a batch in one BEGIN IMMEDIATE transaction of its own
-- statements, which this leaves as they are.

-- A prune takes the unique keys of the jobs it removes, as on PostgreSQL: this index lets
-- a batch find them (noeta/backends/stores/sqlite/retention.py deletes them).
CREATE INDEX job_unique_keys_by_task ON job_unique_keys (task_id);
