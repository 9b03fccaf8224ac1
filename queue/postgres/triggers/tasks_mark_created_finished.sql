CREATE TRIGGER tasks_mark_created_finished BEFORE INSERT ON tasks FOR EACH ROW WHEN (new.status = ANY (ARRAY['done'::text, 'failed'::text, 'cancelled'::text])) EXECUTE FUNCTION noeta_mark_finished();
