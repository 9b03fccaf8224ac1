-- Fixes found by review (issue 25): a rate is charged for the tasks claimed, not for the
-- candidates offered; ...

-- 6. The candidates a claim may take from one queue that has settings, as in 0013, but
-- without charging the rate: the caller's claim statement may drop some of them (its
-- ORDER BY ... LIMIT across queues keeps the oldest), and a queue charged for rows it never
-- got starves below its rate. The claim statement charges the tokens of the rows it
-- claimed, under the lock this function took on the settings row.
CREATE OR REPLACE FUNCTION noeta_claimable_under_limits(p_queue text, p_limit integer)
RETURNS TABLE (id text, priority integer, claimable_at timestamptz, taken_over boolean)
LANGUAGE plpgsql AS $$
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
END $$;


-- 7. A pruned id is taken, also while the prune that takes it has not committed. Its
-- tombstone is invisible until then, so the id is checked again after waiting for
-- whoever holds the task's row: a prune locks it FOR UPDATE (KEY SHARE waits for that,
-- and a row lock taken here first makes the prune skip the row). A row found is left to
-- ON CONFLICT; a row gone while we waited was pruned, and its tombstone is now visible.
-- A new id pays one more probe of the tasks key, which finds nothing.
CREATE OR REPLACE FUNCTION noeta_skip_pruned_id() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM pruned_task_ids WHERE id = NEW.id) THEN
        RETURN NULL;
    END IF;
    PERFORM FROM tasks WHERE id = NEW.id FOR KEY SHARE;
    IF NOT FOUND AND EXISTS (SELECT 1 FROM pruned_task_ids WHERE id = NEW.id) THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END $$;

-- 8. Every id p_id may be a subtask of: <p> of <p>.<call>.<n>, for each way to cut it.
-- Call ids with dots are hashed in new children's ids (noeta/core/subtasks.py), but a
-- child launched before that, p.a.b.1, is a subtask of p, not of p.a: pruned while p
-- lives, p's cancel would fail for ever delivering to it.
CREATE FUNCTION noeta_possible_parent_ids(p_id text) RETURNS text[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN cardinality(parts) < 3 OR parts[cardinality(parts)] !~ '^[0-9]+$'
                THEN '{}'::text[]
                ELSE ARRAY(SELECT array_to_string(parts[1:cut], '.')
                             FROM generate_series(1, cardinality(parts) - 2) AS cut) END
      FROM string_to_array(p_id, '.') AS parts
$$;

-- The family rule of 0010, with every possible parent asked about.
CREATE OR REPLACE FUNCTION noeta_may_prune(p_id text) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT NOT EXISTS (
               SELECT 1 FROM tasks parent
                WHERE parent.id = ANY (noeta_possible_parent_ids(p_id))
                  AND parent.status IN ('ready', 'running', 'holding', 'waiting'))
       AND NOT EXISTS (
               SELECT 1 FROM tasks child
                WHERE child.id ~>=~ (p_id || '.') AND child.id ~<~ (p_id || '/')
                  AND child.status IN ('ready', 'running', 'holding', 'waiting')
                  AND strpos(child.id, '.') > 0)
$$;
