-- Queue limits and priorities (ADR-0073): settings per queue (concurrency across the
-- fleet, per concurrency key, claims per period, paused), and a key and a priority per task.

-- One row per queue that has settings; a queue without a row is claimed as before, with no
-- lock and no count. Every worker and `noeta queue list` read the same row.
CREATE TABLE queue_settings (
    queue               text PRIMARY KEY,
    -- At most this many tasks of the queue hold a live claim (running or holding, lease
    -- not lapsed) at once, across every worker. NULL: no limit.
    concurrency         integer CHECK (concurrency > 0),
    -- At most this many of them with the same concurrency key. NULL: no limit.
    per_key_concurrency integer CHECK (per_key_concurrency > 0),
    -- At most rate_count claims start per rate_seconds: a token bucket of rate_count
    -- tokens refilled evenly, rate_tokens left at rate_at (updated by the claims).
    rate_count          integer CHECK (rate_count > 0),
    rate_seconds        double precision CHECK (rate_seconds > 0),
    rate_tokens         double precision,
    rate_at             timestamptz,
    -- A paused queue is not claimed; its running tasks go on.
    paused              boolean NOT NULL DEFAULT false,
    updated_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT a_rate_has_a_count_and_a_period CHECK (
        (rate_count IS NULL) = (rate_seconds IS NULL))
);

-- A task's concurrency key (a tenant, a repository, a user) and its priority (0-9, higher
-- claimed first, then by due time). Both given at submit.
ALTER TABLE tasks ADD COLUMN concurrency_key text;
ALTER TABLE tasks ADD COLUMN priority integer NOT NULL DEFAULT 0
    CONSTRAINT priority_in_range CHECK (priority BETWEEN 0 AND 9);

-- The claim index per queue and priority. The claim reads the highest priority a queue's
-- rows have (one entry), then probes each priority from there down to 0 with the due-time
-- bound as an index condition (so tasks due tomorrow are never read), and orders what it
-- found: one probe for a queue that never uses priorities, one entry read by each probe
-- that finds a task.
-- It replaces tasks_claimable_in_queue (0009), whose order it extends.
DROP INDEX tasks_claimable_in_queue;
CREATE INDEX tasks_claimable_by_priority ON tasks (queue, priority DESC, claimable_at)
    WHERE claimable_at IS NOT NULL;

-- The scheduler's wake-up looks across every queue by due time, for ready and waiting
-- tasks only; it had tasks_claimable (0001), every claimable row by due time. The claim
-- could use that one too, filtering queue and priority row by row, and where every task
-- has one queue and priority 0 the planner's statistics say the filter passes every row:
-- it chose it, and each probe for a priority nobody uses walked the whole backlog. This
-- index holds no running or holding row, so the claim (which also takes lapsed leases)
-- cannot use it, and the wake-up reads fewer rows.
DROP INDEX tasks_claimable;
CREATE INDEX tasks_due_to_wake ON tasks (claimable_at) INCLUDE (queue)
    WHERE claimable_at IS NOT NULL AND status IN ('ready', 'waiting');

-- Creating a task with its key and priority. The five-argument form (cron fires, new
-- tasks of an append) creates one with neither.
CREATE FUNCTION noeta_create_task(
    p_id text, p_queue text, p_ready timestamptz, p_types text[], p_data text[],
    p_key text, p_priority integer)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tasks (id, queue, status, ready_at, claimable_at, last_seq,
                       concurrency_key, priority)
        VALUES (p_id, p_queue, 'ready', p_ready, coalesce(p_ready, clock_timestamp()),
                coalesce(cardinality(p_types), 0), p_key, p_priority)
        ON CONFLICT (id) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO events (task_id, seq, type, data)
        SELECT p_id, e.ord, e.type, e.data
          FROM unnest(p_types, p_data) WITH ORDINALITY AS e(type, data, ord);
    RETURN true;
END $$;

CREATE OR REPLACE FUNCTION noeta_create_task(
    p_id text, p_queue text, p_ready timestamptz, p_types text[], p_data text[])
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    RETURN noeta_create_task(p_id, p_queue, p_ready, p_types, p_data, NULL, 0);
END $$;

-- The candidates a claim may take from one queue that has settings, locked. The queue's
-- settings row is locked first (FOR UPDATE: claimers of this queue wait for each other,
-- for one short claim statement; claimers of other queues do not), and only then are the
-- live claims counted: each statement of a plpgsql function sees what committed before
-- it, so the count includes every claim of the claimer that held the lock before. A
-- lapsed lease is not live: its slot is free without anyone cleaning up. The caller's
-- claim statement holds the lock until it commits, and claims at most what this returns.
CREATE FUNCTION noeta_claimable_under_limits(p_queue text, p_limit integer)
RETURNS TABLE (id text, priority integer, claimable_at timestamptz, taken_over boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    s queue_settings;
    v_now timestamptz;
    v_room integer := p_limit;
    v_tokens double precision;
    v_counts jsonb;
    v_found integer := 0;
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
    IF s.rate_count IS NOT NULL THEN
        UPDATE queue_settings AS q SET rate_tokens = v_tokens - v_found, rate_at = v_now
         WHERE q.queue = p_queue;
    END IF;
END $$;
