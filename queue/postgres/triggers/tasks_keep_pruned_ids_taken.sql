CREATE TRIGGER tasks_keep_pruned_ids_taken BEFORE INSERT ON tasks FOR EACH ROW EXECUTE FUNCTION noeta_skip_pruned_id();
