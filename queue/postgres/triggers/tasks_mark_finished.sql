CREATE TRIGGER tasks_mark_finished BEFORE UPDATE OF status ON tasks FOR EACH ROW WHEN (old.status IS DISTINCT FROM new.status) EXECUTE FUNCTION noeta_mark_finished();
