CREATE OR REPLACE FUNCTION noeta_wake_idle(p_queue text, p_count integer)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_channel text;
    v_woken integer := 0;
BEGIN
    -- Shared: creators never wait on each other. A worker going idle takes it exclusively
    -- with its registration, so either this sees the registration, or this transaction
    -- has committed before the worker's next claim looks (ADR-0087).
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('noeta.wake:' || current_schema(), 0));
    -- The most recently refreshed first: a dead worker's row, never refreshed, comes last.
    FOR v_channel IN
        DELETE FROM idle_workers WHERE channel IN (
            SELECT channel FROM idle_workers
             WHERE queues @> ARRAY[p_queue] AND expires_at > clock_timestamp()
             ORDER BY expires_at DESC LIMIT p_count FOR UPDATE SKIP LOCKED)
        RETURNING channel
    LOOP
        PERFORM pg_notify(v_channel, p_queue);
        v_woken := v_woken + 1;
    END LOOP;
    RETURN v_woken;
END $function$;
