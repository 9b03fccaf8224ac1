-- A continued task calls no idle worker (issue 33, ADR-0114): the append that makes a
-- canvas claimable (its member's handback) or creates its next member names, in the
-- transaction-local setting noeta.continues, the task its own worker claims next; the
-- wake-up triggers skip that one task (not one in a queue with settings). Nothing else
-- changes: an ordinary append sets nothing, and the triggers call whom they called.
CREATE OR REPLACE FUNCTION noeta_notify_claimable()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    -- The task the appending worker claims next (noeta.continues, set by its append for
    -- this transaction: a canvas member's handback, ADR-0114) calls nobody: an idle worker
    -- called for it would only race that claim. Unless its queue has settings, which
    -- that claim leaves to the due walk.
    IF NEW.id = current_setting('noeta.continues', true) THEN
        IF NOT EXISTS (SELECT FROM queue_settings AS s WHERE s.queue = NEW.queue) THEN
            RETURN NULL;
        END IF;
    END IF;
    PERFORM noeta_wake_idle(NEW.queue, 1);
    RETURN NULL;
END $function$;
;

CREATE OR REPLACE FUNCTION noeta_notify_created()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    -- Not counted: the task its creator claims next (noeta.continues, as in
    -- noeta_notify_claimable: a canvas's next member, ADR-0114).
    PERFORM noeta_wake_idle(due.queue, due.tasks)
       FROM (SELECT queue, count(*)::integer AS tasks FROM created
              WHERE status IN ('ready', 'waiting')
                AND claimable_at <= clock_timestamp()
                AND (id IS DISTINCT FROM current_setting('noeta.continues', true)
                     OR EXISTS (SELECT FROM queue_settings AS s WHERE s.queue = created.queue))
              GROUP BY queue) AS due;
    RETURN NULL;
END $function$;
;
