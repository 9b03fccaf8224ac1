CREATE OR REPLACE FUNCTION noeta_notify_claimable()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pg_notify('noeta_wake', NEW.queue);
    RETURN NULL;
END $function$;
