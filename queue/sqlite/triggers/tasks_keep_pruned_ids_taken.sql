CREATE TRIGGER tasks_keep_pruned_ids_taken
    BEFORE INSERT ON tasks
    WHEN EXISTS (SELECT 1 FROM pruned_task_ids WHERE id = NEW.id)
BEGIN
    SELECT RAISE(IGNORE);
END;
