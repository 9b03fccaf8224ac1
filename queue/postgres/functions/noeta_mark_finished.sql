CREATE OR REPLACE FUNCTION noeta_mark_finished()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    -- Every move into or out of done, failed or cancelled that does not set finished_at
    -- itself (the finishing appends do, and drop the hold: 0024) comes through here.
    NEW.finished_at := CASE WHEN NEW.status IN ('done', 'failed', 'cancelled')
                            THEN coalesce(NEW.updated_at, clock_timestamp()) END;
    IF NEW.finished_at IS NOT NULL THEN
        DELETE FROM model_limit_holds WHERE task_id = NEW.id;
    END IF;
    RETURN NEW;
END $function$;
