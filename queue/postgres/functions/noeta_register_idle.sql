CREATE OR REPLACE FUNCTION noeta_register_idle(p_channel text, p_queues text[], p_lease double precision)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
BEGIN
    -- The exclusive side of noeta_wake_idle's lock: waits for every creator that looked
    -- for idle workers before this registration, and holds new ones off until it commits
    -- (then they see it).
    PERFORM pg_advisory_xact_lock(hashtextextended('noeta.wake:' || current_schema(), 0));
    DELETE FROM idle_workers WHERE expires_at <= clock_timestamp();  -- killed workers'
    INSERT INTO idle_workers (channel, queues, expires_at)
        VALUES (p_channel, p_queues, clock_timestamp() + make_interval(secs => p_lease))
        ON CONFLICT (channel) DO UPDATE
        SET queues = excluded.queues, expires_at = excluded.expires_at;
    -- A statement after the lock, so a snapshot holding those creators' tasks: true if
    -- one of these queues has a task claimable now (claim before waiting).
    RETURN EXISTS (SELECT 1 FROM tasks
                    WHERE queue = ANY (p_queues) AND claimable_at <= clock_timestamp());
END $function$;
