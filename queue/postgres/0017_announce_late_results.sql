-- A kept late result is announced (ADR-0083): a claimer about to settle a half-done call
-- "outcome unknown", whose worker is known alive, waits a short grace for the call's
-- result on LISTEN noeta_late_result instead of polling. The payload is the task id
-- alone: any role may LISTEN, so no content is ever sent.
-- Cost: one pg_notify per row kept (a row a worker keeps only when its claim was gone
-- as its tool returned, or its model call could not be recorded; rare), nothing for a
-- keep that finds the call kept before (ON CONFLICT DO NOTHING inserts no row, and an
-- AFTER INSERT row trigger fires only for rows inserted), nothing anywhere else.
CREATE FUNCTION noeta_announce_late_result() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('noeta_late_result', NEW.task_id);
    RETURN NULL;
END $$;

CREATE TRIGGER late_results_announced
    AFTER INSERT ON late_results
    FOR EACH ROW
    EXECUTE FUNCTION noeta_announce_late_result();
