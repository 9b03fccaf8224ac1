CREATE OR REPLACE FUNCTION noeta_claimable_under_limits(p_queue text, p_limit integer)
 RETURNS TABLE(id text, priority integer, claimable_at timestamp with time zone, taken_over boolean)
 LANGUAGE sql
AS $function$
    SELECT * FROM noeta_claimable_under_limits(p_queue, p_limit, true)
$function$;

CREATE OR REPLACE FUNCTION noeta_claimable_under_limits(p_queue text, p_limit integer, p_charge boolean)
 RETURNS TABLE(id text, priority integer, claimable_at timestamp with time zone, taken_over boolean)
 LANGUAGE sql
AS $function$
    SELECT * FROM noeta_claimable_under_limits(p_queue, p_limit, p_charge, NULL)
$function$;

CREATE OR REPLACE FUNCTION noeta_claimable_under_limits(p_queue text, p_limit integer, p_charge boolean, p_offers text[])
 RETURNS TABLE(id text, priority integer, claimable_at timestamp with time zone, taken_over boolean)
 LANGUAGE plpgsql
AS $function$
#variable_conflict use_column
DECLARE
    s queue_settings;
    v_now timestamptz;
    v_room integer := p_limit;
    v_tokens double precision;
    v_counts jsonb;
    v_found integer := 0;  -- rows returned (the per-key loop stops at the room)
    r record;
BEGIN
    SELECT * INTO s FROM queue_settings AS q WHERE q.queue = p_queue FOR UPDATE;
    IF NOT FOUND OR s.paused THEN
        RETURN;
    END IF;
    v_now := clock_timestamp();
    IF s.concurrency IS NOT NULL THEN
        v_room := least(v_room, s.concurrency - (
            SELECT count(*) FROM tasks AS t
             WHERE t.status IN ('running', 'holding') AND t.queue = p_queue
               AND t.lease_until > v_now)::integer);
    END IF;
    IF s.rate_count IS NOT NULL THEN
        v_tokens := least(s.rate_count::double precision,
            coalesce(s.rate_tokens, s.rate_count)
            + extract(epoch FROM v_now - coalesce(s.rate_at, v_now))
              * s.rate_count / s.rate_seconds);
        v_room := least(v_room, floor(v_tokens)::integer);
    END IF;
    IF v_room <= 0 THEN
        RETURN;
    END IF;
    IF s.per_key_concurrency IS NULL THEN
        RETURN QUERY
            SELECT found.* FROM generate_series(
                (SELECT t.priority FROM tasks AS t
                  WHERE t.queue = p_queue AND t.claimable_at IS NOT NULL
                  ORDER BY t.priority DESC LIMIT 1), 0, -1) AS p(priority)
             CROSS JOIN LATERAL (
                SELECT t.id, t.priority, t.claimable_at,
                       t.status IN ('running', 'holding')
                  FROM tasks AS t
                 WHERE t.queue = p_queue AND t.priority = p.priority
                   AND t.claimable_at <= now()
                   AND (p_offers IS NULL OR t.needs IS NULL OR t.needs <@ p_offers)
                 ORDER BY t.claimable_at
                 LIMIT v_room
                   FOR UPDATE SKIP LOCKED
             ) AS found
             ORDER BY 2 DESC, 3
             LIMIT v_room;
        GET DIAGNOSTICS v_found = ROW_COUNT;
    ELSE
        -- Oldest first across keys, skipping the keys at their limit (and those that
        -- reach it within this claim). Tasks without a key count only for the queue.
        SELECT coalesce(jsonb_object_agg(live.key, live.n), '{}') INTO v_counts
          FROM (SELECT t.concurrency_key, count(*) FROM tasks AS t
                 WHERE t.status IN ('running', 'holding') AND t.queue = p_queue
                   AND t.lease_until > v_now AND t.concurrency_key IS NOT NULL
                 GROUP BY 1) AS live(key, n);
        -- Read priority by priority (each walk bounded by now() in the index) until the
        -- room is filled.
        FOR r IN
            SELECT found.* FROM generate_series(
                (SELECT t.priority FROM tasks AS t
                  WHERE t.queue = p_queue AND t.claimable_at IS NOT NULL
                  ORDER BY t.priority DESC LIMIT 1), 0, -1) AS p(priority)
             CROSS JOIN LATERAL (
                SELECT t.id, t.priority, t.claimable_at,
                       t.status IN ('running', 'holding') AS taken_over, t.concurrency_key
                  FROM tasks AS t
                 WHERE t.queue = p_queue AND t.priority = p.priority
                   AND t.claimable_at <= now()
                   AND (p_offers IS NULL OR t.needs IS NULL OR t.needs <@ p_offers)
                   AND coalesce((v_counts ->> t.concurrency_key)::integer, 0)
                       < s.per_key_concurrency
                 ORDER BY t.claimable_at
                 -- Rows of a key that reaches its limit within this claim are skipped
                 -- below; past this many a claim takes fewer and the next goes on.
                 LIMIT 10 * v_room
             ) AS found
        LOOP
            CONTINUE WHEN coalesce((v_counts ->> r.concurrency_key)::integer, 0)
                          >= s.per_key_concurrency;
            PERFORM FROM tasks AS t
              WHERE t.id = r.id AND t.claimable_at <= now() FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;
            IF r.concurrency_key IS NOT NULL THEN
                v_counts := jsonb_set(v_counts, ARRAY[r.concurrency_key], to_jsonb(
                    coalesce((v_counts ->> r.concurrency_key)::integer, 0) + 1));
            END IF;
            id := r.id;
            priority := r.priority;
            claimable_at := r.claimable_at;
            taken_over := r.taken_over;
            RETURN NEXT;
            v_found := v_found + 1;
            EXIT WHEN v_found >= v_room;
        END LOOP;
    END IF;
    IF p_charge AND s.rate_count IS NOT NULL THEN
        UPDATE queue_settings AS q SET rate_tokens = v_tokens - v_found, rate_at = v_now
         WHERE q.queue = p_queue;
    END IF;
END $function$;
