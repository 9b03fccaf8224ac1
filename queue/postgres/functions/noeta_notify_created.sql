CREATE OR REPLACE FUNCTION noeta_notify_created()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM noeta_wake_idle(due.queue, due.tasks)
       FROM (SELECT queue, count(*)::integer AS tasks FROM created
              WHERE status IN ('ready', 'waiting')
                AND claimable_at <= clock_timestamp()
              GROUP BY queue) AS due;
    RETURN NULL;
END $function$;
