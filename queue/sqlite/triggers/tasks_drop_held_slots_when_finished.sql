CREATE TRIGGER tasks_drop_held_slots_when_finished
    AFTER UPDATE OF status ON tasks
    FOR EACH ROW WHEN NEW.status IN ('done', 'failed', 'cancelled')
BEGIN
    DELETE FROM model_limit_holds WHERE task_id = NEW.id;
END;
