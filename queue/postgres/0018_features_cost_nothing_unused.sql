-- Features cost nothing where they are unused (issue 28 item 1).
--
-- tasks_mark_finished ran on every change of status: a claim (ready -> running), a wait,
-- a hand-back, each ran noeta_mark_finished to set finished_at to what it already was
-- (NULL). It now runs only where finished_at changes: into a finished state, or out of
-- one (a finished task resumed). One plpgsql run less per claim and per wait.
DROP TRIGGER tasks_mark_finished ON tasks;
CREATE TRIGGER tasks_mark_finished BEFORE UPDATE OF status ON tasks FOR EACH ROW WHEN (old.status IS DISTINCT FROM new.status AND ((new.status = ANY (ARRAY['done'::text, 'failed'::text, 'cancelled'::text])) OR (old.status = ANY (ARRAY['done'::text, 'failed'::text, 'cancelled'::text])))) EXECUTE FUNCTION noeta_mark_finished();
