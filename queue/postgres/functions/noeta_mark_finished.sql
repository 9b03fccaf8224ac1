CREATE OR REPLACE FUNCTION noeta_mark_finished()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    NEW.finished_at := CASE WHEN NEW.status IN ('done', 'failed', 'cancelled')
                            THEN coalesce(NEW.updated_at, clock_timestamp()) END;
    IF NEW.finished_at IS NOT NULL THEN
        DELETE FROM model_limit_holds WHERE task_id = NEW.id;
    END IF;
    RETURN NEW;
END $function$;
