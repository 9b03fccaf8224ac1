-- The claim is planned once per session, not at every call (issue 28).
--
-- The claim was a statement the worker sent with parameters; PostgreSQL's plan cache
-- planned it anew at every call (pg_prepared_statements: 0 generic plans, every call a
-- custom one), because the generic plan's estimate (an array of queues of unknown length,
-- a LIMIT of unknown size) always looked dearer than a plan for the values at hand.
-- Planning that statement cost more than running it: 1,728 against 594 us a call on a
-- loaded 2-core machine (a prepared claim, custom against forced generic), about 400 us
-- a task in a drain. noeta_due_for_claim runs the same walk with a generic plan,
-- made once per session by plpgsql's plan cache (`SET plan_cache_mode` on the function
-- alone: no other statement of the session is affected, and it holds through a pooler).
-- The function walks and locks the due rows (FOR UPDATE SKIP LOCKED: the locks last to
-- the end of the claim's statement, its transaction); the claim's statement updates
-- them, charges the rate and loads their logs as before. ROWS 10: a claim takes a
-- handful of tasks, so that statement joins them to tasks, events and the inbox by
-- index, as it did when the planner saw the LIMIT's value.
CREATE FUNCTION noeta_due_for_claim(p_queues text[], p_limit integer, p_excluding text[], p_offers text[])
 RETURNS TABLE(id text, priority integer, claimable_at timestamp with time zone, taken_over boolean, limited boolean)
 LANGUAGE plpgsql
 ROWS 10
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
#variable_conflict use_column
BEGIN
    -- Up to p_limit due tasks of these queues, locked, the highest priority first and
    -- then those due longest. A queue without settings is walked per queue (LATERAL over
    -- the queues), so a backlog due in another queue is never read, and per priority:
    -- one entry of tasks_claimable_by_priority says the highest a row of the queue has,
    -- then one probe per priority from there down to 0. A queue with settings is asked
    -- through noeta_claimable_under_limits, which locks its settings row, counts its live
    -- claims and returns at most the room left (`limited`: the claim charges its rate);
    -- those queues are taken in name order, so two claimers never wait for each other's
    -- locks in a circle. now() (the claim's transaction's start) is stable, so it is the
    -- index bound and each walk stops at the present; clock_timestamp() would make it a
    -- filter walking every future row. SKIP LOCKED: claimants never wait on each other's
    -- tasks. p_excluding: the claimer's own runs (ADR-0079). p_offers: the plugin names
    -- the claimer has; a task needing one it lacks is left to a worker that has it
    -- (NULL: it offers anything; ADR-0092).
    RETURN QUERY
    SELECT found.id, found.priority, found.claimable_at, found.taken_over, false
      FROM (SELECT q.queue, (SELECT t.priority FROM tasks AS t
                               WHERE t.queue = q.queue AND t.claimable_at IS NOT NULL
                               ORDER BY t.priority DESC LIMIT 1) AS top
              FROM unnest(p_queues) AS q(queue)
             WHERE NOT EXISTS (SELECT FROM queue_settings AS s WHERE s.queue = q.queue)
            OFFSET 0) AS q
     CROSS JOIN generate_series(q.top, 0, -1) AS p(priority)
     CROSS JOIN LATERAL (
        SELECT t.id, t.priority, t.claimable_at,
               t.status IN ('running', 'holding') AS taken_over
          FROM tasks AS t
         WHERE t.queue = q.queue AND t.priority = p.priority AND t.claimable_at <= now()
           AND t.id <> ALL(p_excluding)
           AND (p_offers IS NULL OR t.needs IS NULL OR t.needs <@ p_offers)
         ORDER BY t.claimable_at
         LIMIT p_limit
           FOR UPDATE SKIP LOCKED
     ) AS found
    UNION ALL
    SELECT limited.id, limited.priority, limited.claimable_at, limited.taken_over, true
      FROM (SELECT s.queue FROM queue_settings AS s
             WHERE s.queue = ANY(p_queues) ORDER BY s.queue OFFSET 0) AS q
     CROSS JOIN LATERAL noeta_claimable_under_limits(q.queue, p_limit, false, p_offers)
           AS limited
     WHERE limited.id <> ALL(p_excluding)
     ORDER BY 2 DESC, 3
     LIMIT p_limit;
END $function$;
