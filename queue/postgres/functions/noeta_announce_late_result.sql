CREATE OR REPLACE FUNCTION noeta_announce_late_result()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pg_notify('noeta_late_result', NEW.task_id);
    RETURN NULL;
END $function$;
