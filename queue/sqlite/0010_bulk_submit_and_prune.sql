-- Bulk submit and retention (ADR-0065, ADR-0066). No NOTIFY in sqlite: workers poll.

-- The ids of pruned tasks, unless the operator said they may be used again
-- (`noeta db prune --forget-ids`): a client that re-submits a task by its id after a
-- retry must never run it twice because the first run was pruned in between.
CREATE TABLE pruned_task_ids (
    id        TEXT PRIMARY KEY NOT NULL,
    -- Microseconds since the Unix epoch (see 0001).
    pruned_at INTEGER NOT NULL
                  DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER))
);

-- A pruned id is taken: creating a task with it creates nothing, as for an existing id.
CREATE TRIGGER tasks_keep_pruned_ids_taken
    BEFORE INSERT ON tasks
    WHEN EXISTS (SELECT 1 FROM pruned_task_ids WHERE id = NEW.id)
BEGIN
    SELECT RAISE(IGNORE);
END;

-- Finding finished tasks by when they finished (the finishing append's time).
CREATE INDEX tasks_finished ON tasks (updated_at) WHERE status IN ('done', 'failed', 'cancelled');

-- The cron history of a pruned task goes with it.
CREATE INDEX cron_fires_by_task ON cron_fires (task_id) WHERE task_id IS NOT NULL;
