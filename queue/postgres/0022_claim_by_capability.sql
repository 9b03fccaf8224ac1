-- Jobs go only to workers that can run them (issue 29 item 1, ADR-0092).
--
-- A worker that lacked a task's plugin claimed it anyway, held it a lease, and after
-- three claims failed it plugin_missing while a worker that had the plugin sat idle. Now
-- a task says what it needs and the claim takes only what the claimer offers.

-- The names of the plugins the task has pinned (a job: its function's module); NULL:
-- any worker may run it (nothing pinned yet). Written with the row by the creates
-- (noeta_create_task, which subtasks and cron fires call too, and noeta_create_tasks),
-- and kept by the trigger below when a claimer pins (an agent task's first append, a
-- new version): a trigger's UPDATE per create made a bulk create 2.8x slower. Names
-- only: a plugin present at another version is pinned again by the claimer (ADR-023),
-- so a worker with the name can run the task. Not indexed: the claim filters the rows
-- its walk reads (ADR-0092 says why, and what that costs).
ALTER TABLE tasks ADD COLUMN needs text[];

-- The live workers: what each serves and offers, refreshed by its periodic round (a third
-- of its lease), deleted when it stops. A row whose expires_at has passed is a worker
-- that died: it offers nothing. Read by `noeta tasks` / `noeta show` to say that a task
-- waits for a plugin no live worker offers; issue 31 builds the full registry on it.
CREATE TABLE workers (
    id         text PRIMARY KEY,
    queues     text[] NOT NULL,
    offers     text[],  -- plugin names; NULL: it runs anything (it does not check pins)
    started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_seen  timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at timestamptz NOT NULL
);

CREATE FUNCTION noeta_record_needs() RETURNS trigger LANGUAGE plpgsql AS $function$
DECLARE
    v_needs text[];
BEGIN
    -- The pins' names, sorted, without repeats; no pins: any worker.
    SELECT array_agg(DISTINCT pin ->> 0 ORDER BY pin ->> 0) INTO v_needs
      FROM json_array_elements(NEW.data::json -> 'pins') AS pin;
    -- A pin again with the same names (a new version) writes no row version.
    UPDATE tasks SET needs = v_needs
     WHERE id = NEW.task_id AND needs IS DISTINCT FROM v_needs;
    RETURN NULL;
END $function$;

-- WHEN: any other event is never queued for the trigger, so an append pays nothing;
-- nor is a create's (epoch 0: the create wrote needs with the row).
CREATE TRIGGER events_record_needs AFTER INSERT ON events FOR EACH ROW
    WHEN (NEW.type = 'PluginsPinned' AND NEW.epoch > 0) EXECUTE FUNCTION noeta_record_needs();

-- The claim of a queue with settings takes only what the claimer offers (p_offers NULL:
-- anything). The 3-argument form stays for callers that offer anything.
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

CREATE OR REPLACE FUNCTION noeta_claimable_under_limits(p_queue text, p_limit integer, p_charge boolean)
 RETURNS TABLE(id text, priority integer, claimable_at timestamp with time zone, taken_over boolean)
 LANGUAGE sql
AS $function$
    SELECT * FROM noeta_claimable_under_limits(p_queue, p_limit, p_charge, NULL)
$function$;

CREATE OR REPLACE FUNCTION noeta_claimable_under_limits(p_queue text, p_limit integer)
 RETURNS TABLE(id text, priority integer, claimable_at timestamp with time zone, taken_over boolean)
 LANGUAGE sql
AS $function$
    SELECT * FROM noeta_claimable_under_limits(p_queue, p_limit, true)
$function$;


-- The creates write needs with the row (the function files, copied).
CREATE OR REPLACE FUNCTION noeta_create_task(p_id text, p_queue text, p_ready timestamp with time zone, p_types text[], p_data text[])
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
BEGIN
    RETURN noeta_create_task(p_id, p_queue, p_ready, p_types, p_data, NULL, 0);
END $function$;

CREATE OR REPLACE FUNCTION noeta_create_task(p_id text, p_queue text, p_ready timestamp with time zone, p_types text[], p_data text[], p_key text, p_priority integer)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
BEGIN
    -- needs (0022, ADR-0092): the names its PluginsPinned event pins (a job's module),
    -- written with the row: a trigger's UPDATE per create cost a bulk create 2.8x.
    INSERT INTO tasks (id, queue, status, ready_at, claimable_at, last_seq,
                       concurrency_key, priority, needs)
        VALUES (p_id, p_queue, 'ready', p_ready, coalesce(p_ready, clock_timestamp()),
                coalesce(cardinality(p_types), 0), p_key, p_priority,
                (SELECT array_agg(DISTINCT pin ->> 0 ORDER BY pin ->> 0)
                   FROM unnest(p_types, p_data) AS e(type, data)
                  CROSS JOIN LATERAL json_array_elements(CASE WHEN e.type = 'PluginsPinned'
                                                         THEN e.data::json -> 'pins' END) AS pin))
        ON CONFLICT (id) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO events (task_id, seq, type, data)
        SELECT p_id, e.ord, e.type, e.data
          FROM unnest(p_types, p_data) WITH ORDINALITY AS e(type, data, ord);
    RETURN true;
END $function$;

CREATE OR REPLACE FUNCTION noeta_create_tasks(p_ids text[], p_queues text[], p_ready timestamp with time zone[], p_counts integer[], p_event_task integer[], p_event_seq integer[], p_types text[], p_data text[])
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_created text[];
    v_taken text;
BEGIN
    WITH inserted AS (
        INSERT INTO tasks (id, queue, status, ready_at, claimable_at, last_seq, needs)
            SELECT t.id, t.queue, 'ready', t.ready, coalesce(t.ready, clock_timestamp()),
                   t.count, pinned.needs
              FROM unnest(p_ids, p_queues, p_ready, p_counts)
                   WITH ORDINALITY AS t(id, queue, ready, count, ord)
              LEFT JOIN (SELECT e.task, array_agg(DISTINCT pin ->> 0 ORDER BY pin ->> 0)
                           FROM unnest(p_event_task, p_types, p_data) AS e(task, type, data)
                          CROSS JOIN LATERAL json_array_elements(
                                CASE WHEN e.type = 'PluginsPinned'
                                     THEN e.data::json -> 'pins' END) AS pin
                          GROUP BY e.task) AS pinned(task, needs) ON pinned.task = t.ord
            ON CONFLICT (id) DO NOTHING
            RETURNING id)
    SELECT array_agg(id) INTO v_created FROM inserted;
    IF coalesce(cardinality(v_created), 0) <> coalesce(cardinality(p_ids), 0) THEN
        SELECT t.id INTO v_taken
          FROM unnest(p_ids) WITH ORDINALITY AS t(id, ord)
         WHERE NOT EXISTS (SELECT 1 FROM unnest(v_created) AS made(id) WHERE made.id = t.id)
         ORDER BY t.ord LIMIT 1;
        -- None missing: an id was given twice (the client refuses that before sending).
        RAISE EXCEPTION USING ERRCODE = 'NT409', MESSAGE = coalesce(v_taken, '?');
    END IF;
    INSERT INTO events (task_id, seq, type, data)
        SELECT p_ids[e.task], e.seq, e.type, e.data
          FROM unnest(p_event_task, p_event_seq, p_types, p_data) AS e(task, seq, type, data);
    RETURN cardinality(v_created);
END $function$;

CREATE OR REPLACE FUNCTION noeta_create_tasks(p_ids text[], p_queues text[], p_ready timestamp with time zone[], p_counts integer[], p_event_task integer[], p_event_seq integer[], p_types text[], p_data text[], p_keys text[], p_priorities integer[])
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_created text[];
    v_taken text;
BEGIN
    WITH inserted AS (
        -- needs (0022, ADR-0092): the names each task's PluginsPinned event pins.
        INSERT INTO tasks (id, queue, status, ready_at, claimable_at, last_seq,
                           concurrency_key, priority, needs)
            SELECT t.id, t.queue, 'ready', t.ready, coalesce(t.ready, clock_timestamp()),
                   t.count, t.key, t.priority, pinned.needs
              FROM unnest(p_ids, p_queues, p_ready, p_counts, p_keys, p_priorities)
                   WITH ORDINALITY AS t(id, queue, ready, count, key, priority, ord)
              LEFT JOIN (SELECT e.task, array_agg(DISTINCT pin ->> 0 ORDER BY pin ->> 0)
                           FROM unnest(p_event_task, p_types, p_data) AS e(task, type, data)
                          CROSS JOIN LATERAL json_array_elements(
                                CASE WHEN e.type = 'PluginsPinned'
                                     THEN e.data::json -> 'pins' END) AS pin
                          GROUP BY e.task) AS pinned(task, needs) ON pinned.task = t.ord
            ON CONFLICT (id) DO NOTHING
            RETURNING id)
    SELECT array_agg(id) INTO v_created FROM inserted;
    IF coalesce(cardinality(v_created), 0) <> coalesce(cardinality(p_ids), 0) THEN
        SELECT t.id INTO v_taken
          FROM unnest(p_ids) WITH ORDINALITY AS t(id, ord)
         WHERE NOT EXISTS (SELECT 1 FROM unnest(v_created) AS made(id) WHERE made.id = t.id)
         ORDER BY t.ord LIMIT 1;
        RAISE EXCEPTION USING ERRCODE = 'NT409', MESSAGE = coalesce(v_taken, '?');
    END IF;
    INSERT INTO events (task_id, seq, type, data)
        SELECT p_ids[e.task], e.seq, e.type, e.data
          FROM unnest(p_event_task, p_event_seq, p_types, p_data) AS e(task, seq, type, data);
    RETURN cardinality(v_created);
END $function$;
