CREATE OR REPLACE FUNCTION noeta_register_idle(p_channel text, p_queues text[], p_lease double precision)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now timestamptz;
BEGIN
    -- The exclusive side of noeta_wake_idle's lock: waits for every creator that looked
    -- for idle workers before this registration, and holds new ones off until it commits
    -- (then they see it).
    PERFORM pg_advisory_xact_lock(hashtextextended('noeta.wake:' || current_schema(), 0));
    v_now := clock_timestamp();
    DELETE FROM idle_workers WHERE expires_at <= v_now;  -- killed workers'
    INSERT INTO idle_workers (channel, queues, expires_at)
        VALUES (p_channel, p_queues, v_now + make_interval(secs => p_lease))
        ON CONFLICT (channel) DO UPDATE
        SET queues = excluded.queues, expires_at = excluded.expires_at;
    -- A statement after the lock, so a snapshot holding those creators' tasks: true if
    -- one of these queues has a task claimable now (claim before waiting). The claim's
    -- walk, per queue and priority down the claim index: a probe with clock_timestamp()
    -- (volatile) or a generic plan's parameter scanned the whole table (94 ms beside
    -- 200,000 future tasks, all of it holding creators off).
    RETURN EXISTS (
        SELECT 1 FROM unnest(p_queues) AS q(queue)
         CROSS JOIN LATERAL (SELECT t.priority FROM tasks AS t
                              WHERE t.queue = q.queue AND t.claimable_at IS NOT NULL
                              ORDER BY t.priority DESC LIMIT 1) AS top
         CROSS JOIN generate_series(top.priority, 0, -1) AS p(priority)
         CROSS JOIN LATERAL (SELECT 1 FROM tasks AS t
                              WHERE t.queue = q.queue AND t.priority = p.priority
                                AND t.claimable_at <= v_now
                              ORDER BY t.claimable_at LIMIT 1) AS found);
END $function$;
