-- Fixes found by review (issue 25), as in PostgreSQL's 0014.

-- A held model-limit slot goes when its task finishes: the attempt that would have
-- taken it never comes.
CREATE TRIGGER tasks_drop_held_slots_when_finished
    AFTER UPDATE OF status ON tasks
    FOR EACH ROW WHEN NEW.status IN ('done', 'failed', 'cancelled')
BEGIN
    DELETE FROM model_limit_holds WHERE task_id = NEW.id;
END;

-- Those left by finished and pruned tasks before this migration.
DELETE FROM model_limit_holds
 WHERE NOT EXISTS (SELECT 1 FROM tasks t WHERE t.id = model_limit_holds.task_id
                      AND t.status IN ('ready', 'running', 'holding', 'waiting'));
