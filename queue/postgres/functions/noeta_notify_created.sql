CREATE OR REPLACE FUNCTION noeta_notify_created()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM pg_notify('noeta_wake', due.queue)
       FROM (SELECT DISTINCT queue FROM created
              WHERE status IN ('ready', 'waiting')
                AND claimable_at <= clock_timestamp()) AS due;
    RETURN NULL;
END $function$;
