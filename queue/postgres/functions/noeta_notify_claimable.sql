CREATE OR REPLACE FUNCTION noeta_notify_claimable()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    -- The task the appending worker claims next (noeta.continues, set by its append for
    -- this transaction: a canvas member's handback, ADR-0117) calls nobody: an idle worker
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
