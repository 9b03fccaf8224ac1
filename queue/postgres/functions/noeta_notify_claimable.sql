CREATE OR REPLACE FUNCTION noeta_notify_claimable()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM noeta_wake_idle(NEW.queue, 1);
    RETURN NULL;
END $function$;
