CREATE OR REPLACE FUNCTION noeta_fence(p_task text, p_epoch bigint, p_expected_seq bigint)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
AS $function$
DECLARE
    t record;
    v_now timestamptz;
BEGIN
    SELECT owner_epoch, status, lease_until, last_seq INTO t
      FROM tasks WHERE id = p_task FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'NT404', MESSAGE = p_task;
    END IF;
    v_now := clock_timestamp();
    IF t.owner_epoch <> p_epoch THEN
        RAISE EXCEPTION USING ERRCODE = 'NT409', MESSAGE = format(
            'claimed again since (epoch %s, this claim has %s)', t.owner_epoch, p_epoch);
    END IF;
    IF t.status NOT IN ('running', 'holding') THEN
        RAISE EXCEPTION USING ERRCODE = 'NT409', MESSAGE = format(
            'not held by this claim (status %s)', t.status);
    END IF;
    IF t.lease_until <= v_now THEN
        RAISE EXCEPTION USING ERRCODE = 'NT409', MESSAGE = 'the lease has expired';
    END IF;
    IF t.last_seq <> p_expected_seq THEN
        RAISE EXCEPTION USING ERRCODE = 'NT409', MESSAGE = format(
            'the log ends at seq %s, not %s', t.last_seq, p_expected_seq);
    END IF;
    RETURN v_now;
END $function$;
