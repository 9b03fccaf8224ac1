CREATE OR REPLACE FUNCTION noeta_notify_created()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    -- Not counted: the task its creator claims next (noeta.continues, as in
    -- noeta_notify_claimable: a canvas's next member, ADR-0117).
    PERFORM noeta_wake_idle(due.queue, due.tasks)
       FROM (SELECT queue, count(*)::integer AS tasks FROM created
              WHERE status IN ('ready', 'waiting')
                AND claimable_at <= clock_timestamp()
                AND (id IS DISTINCT FROM current_setting('noeta.continues', true)
                     OR EXISTS (SELECT FROM queue_settings AS s WHERE s.queue = created.queue))
              GROUP BY queue) AS due;
    RETURN NULL;
END $function$;
