-- Fixes found by review (issue 25), one section per item of the issue: a rate charged
-- for the tasks claimed (6), pruned ids kept taken during the prune (7), the parents of
-- dotted subtask ids (8), subtasks, cron tasks and batches with key and priority (9),
-- model-limit lock order, held slots and prune batches bounded by events (10), and no
-- unfenced helper callable by the workers (22).

-- 6. The candidates a claim may take from one queue that has settings, as in 0013, and
-- with p_charge false without charging the rate: the caller's claim statement may drop
-- some of them (its ORDER BY ... LIMIT across queues keeps the oldest), and a queue
-- charged for rows it never got starves below its rate. The claim statement then charges
-- the tokens of the rows it claimed, under the lock this function took on the settings
-- row. (The two-argument form of 0013 charges, as an older worker's claim expects.)
CREATE FUNCTION noeta_claimable_under_limits(p_queue text, p_limit integer, p_charge boolean)
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
    IF p_charge AND s.rate_count IS NOT NULL THEN
        UPDATE queue_settings AS q SET rate_tokens = v_tokens - v_found, rate_at = v_now
         WHERE q.queue = p_queue;
    END IF;
END $$;

CREATE OR REPLACE FUNCTION noeta_claimable_under_limits(p_queue text, p_limit integer)
RETURNS TABLE (id text, priority integer, claimable_at timestamptz, taken_over boolean)
LANGUAGE sql AS $$
    SELECT * FROM noeta_claimable_under_limits(p_queue, p_limit, true)
$$;


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

-- 22. The fenced appends write their events themselves: noeta_insert_events (0009) and
-- noeta_take_model_budget (0012) write without a fence, and any role with EXECUTE could
-- call them directly (append to a finished task, with any epoch). They are no longer
-- called, and no role but the owner may execute them (below; ops/grants.sql likewise).
CREATE OR REPLACE FUNCTION noeta_append_and_continue(
    p_task text, p_epoch bigint, p_expected_seq bigint, p_events jsonb)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := noeta_fence(p_task, p_epoch, p_expected_seq);
    v_seq bigint := p_expected_seq + jsonb_array_length(p_events);
BEGIN
    INSERT INTO events (task_id, seq, type, data, epoch, owner)
        SELECT p_task, p_expected_seq + e.ord, e.pair->>0, e.pair->>1, p_epoch,
               (SELECT owner FROM tasks WHERE id = p_task)
          FROM jsonb_array_elements(p_events) WITH ORDINALITY AS e(pair, ord);
    UPDATE tasks SET last_seq = v_seq, status = 'running', updated_at = v_now
     WHERE id = p_task;
    RETURN v_seq;
END $$;

CREATE OR REPLACE FUNCTION noeta_append_and_finish(
    p_task text, p_epoch bigint, p_expected_seq bigint, p_events jsonb, p_status text)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := noeta_fence(p_task, p_epoch, p_expected_seq);
    v_seq bigint := p_expected_seq + jsonb_array_length(p_events);
BEGIN
    IF p_status NOT IN ('done', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'noeta_append_and_finish: % is not a finished status', p_status;
    END IF;
    INSERT INTO events (task_id, seq, type, data, epoch, owner)
        SELECT p_task, p_expected_seq + e.ord, e.pair->>0, e.pair->>1, p_epoch,
               (SELECT owner FROM tasks WHERE id = p_task)
          FROM jsonb_array_elements(p_events) WITH ORDINALITY AS e(pair, ord);
    UPDATE tasks SET last_seq = v_seq, status = p_status, lease_until = NULL,
           ready_at = NULL, claimable_at = NULL, updated_at = v_now
     WHERE id = p_task;
    PERFORM pg_notify('noeta_finished', p_task);
    RETURN v_seq;
END $$;

-- The ModelCalled append of 0012, step for step, with the budget taken by one statement
-- of its own (the limit rows are already locked, in key order, by the loop).
CREATE OR REPLACE FUNCTION noeta_append_model_called(
    p_task text, p_epoch bigint, p_expected_seq bigint, p_events jsonb,
    p_keys text[], p_tokens bigint,
    OUT seq bigint, OUT retry_at timestamptz, OUT limit_key text)
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := noeta_fence(p_task, p_epoch, p_expected_seq);
    v_hold timestamptz;
    v_hold_key text;
    v_slot timestamptz := v_now;
    v_slot_key text;
    v_pause timestamptz;
    v_pause_key text;
    v_limited boolean := false;  -- a limit applies (else: one statement fewer)
    v_charge_at timestamptz;     -- the budget is taken at this moment, if any
    v_charge_calls integer := 0;
    l record;
BEGIN
    FOR l IN SELECT * FROM model_limits m WHERE m.key = ANY (p_keys) ORDER BY m.key
             FOR UPDATE LOOP
        v_limited := true;
        IF l.paused_until > v_now AND (v_pause IS NULL OR l.paused_until > v_pause) THEN
            v_pause := l.paused_until;
            v_pause_key := l.key;
        END IF;
        IF l.requests_at > v_slot THEN
            v_slot := l.requests_at;
            v_slot_key := l.key;
        END IF;
        IF l.tokens_at > v_slot THEN
            v_slot := l.tokens_at;
            v_slot_key := l.key;
        END IF;
    END LOOP;
    IF v_limited THEN  -- no limit applies, no slot is held (clearing a limit drops them)
        DELETE FROM model_limit_holds h WHERE h.task_id = p_task
            RETURNING h.until, h.limit_key INTO v_hold, v_hold_key;
    END IF;
    IF v_pause IS NOT NULL THEN
        -- Paused: a new slot after the pause, spaced like any other (a slot held before
        -- is given up), so the tasks held off do not all call at its end.
        retry_at := greatest(v_slot, v_pause);
        limit_key := v_pause_key || ' (paused after a 429)';
        v_charge_at := retry_at;
        INSERT INTO model_limit_holds VALUES (p_task, retry_at, v_pause_key);
    ELSIF v_hold > v_now THEN
        retry_at := v_hold;  -- back before its slot: it keeps waiting for it
        limit_key := v_hold_key;
        INSERT INTO model_limit_holds VALUES (p_task, v_hold, v_hold_key);
    ELSIF v_hold IS NULL AND v_slot > v_now THEN
        retry_at := v_slot;
        limit_key := v_slot_key;
        v_charge_at := v_slot;
        INSERT INTO model_limit_holds VALUES (p_task, v_slot, v_slot_key);
    ELSIF v_limited AND v_hold IS NULL THEN
        v_charge_at := v_now;  -- allowed now
        v_charge_calls := 1;
    END IF;
    IF v_charge_at IS NOT NULL THEN
        UPDATE model_limits m SET
            requests_at = CASE WHEN m.rpm IS NULL THEN NULL ELSE
                greatest(m.requests_at, v_charge_at) + interval '60 seconds' / m.rpm END,
            tokens_at = CASE WHEN m.tpm IS NULL THEN NULL ELSE
                greatest(m.tokens_at, v_charge_at) + interval '60 seconds' * p_tokens / m.tpm END,
            calls = m.calls + v_charge_calls, updated_at = clock_timestamp()
         WHERE m.key = ANY (p_keys);
    END IF;
    IF retry_at IS NULL THEN
        -- Allowed: now, or at the slot it held (charged when it was reserved).
        IF v_limited AND v_hold IS NOT NULL THEN
            UPDATE model_limits m SET calls = m.calls + 1 WHERE m.key = ANY (p_keys);
        END IF;
        INSERT INTO events (task_id, seq, type, data, epoch, owner)
            SELECT p_task, p_expected_seq + e.ord, e.pair->>0, e.pair->>1, p_epoch,
                   (SELECT t.owner FROM tasks AS t WHERE t.id = p_task)
              FROM jsonb_array_elements(p_events) WITH ORDINALITY AS e(pair, ord);
        seq := p_expected_seq + jsonb_array_length(p_events);
        UPDATE tasks SET last_seq = seq, status = 'running', updated_at = v_now
         WHERE id = p_task;
        RETURN;
    END IF;
    UPDATE model_limits m SET handbacks = m.handbacks + 1,
           waited_seconds = m.waited_seconds + extract(epoch FROM retry_at - v_now)
     WHERE m.key = split_part(limit_key, ' ', 1);
    UPDATE tasks SET status = 'ready', lease_until = NULL, ready_at = retry_at,
           claimable_at = retry_at, updated_at = v_now
     WHERE id = p_task;
END $$;

REVOKE EXECUTE ON FUNCTION noeta_insert_events(text, bigint, bigint, jsonb) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION noeta_take_model_budget(text[], bigint, timestamptz, integer)
    FROM PUBLIC;
-- And from every role granted it by name (ops/grants.sql's worker), at once: a rolling
-- upgrade need not wait for grants.sql to run again.
DO $revoke$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT p.oid::regprocedure AS helper, a.grantee::regrole AS grantee
          FROM pg_proc AS p, aclexplode(p.proacl) AS a
         WHERE p.pronamespace = current_schema()::regnamespace
           AND p.proname IN ('noeta_insert_events', 'noeta_take_model_budget')
           AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM %s', r.helper, r.grantee);
    END LOOP;
END
$revoke$;

-- 10. Every statement that writes several limit rows locks them in key order first, as
-- the ModelCalled append does: an UPDATE ... WHERE key = ANY locks in the order its plan
-- reads (a sequential scan: heap order), and two writers could wait for each other.
CREATE OR REPLACE FUNCTION noeta_model_tokens_used(p_keys text[], p_delta bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM FROM model_limits AS m WHERE m.key = ANY (p_keys) ORDER BY m.key FOR UPDATE;
    UPDATE model_limits SET tokens_at = tokens_at + interval '60 seconds' * p_delta / tpm,
           updated_at = clock_timestamp()
     WHERE key = ANY (p_keys) AND tpm IS NOT NULL AND tokens_at IS NOT NULL;
END $$;

CREATE OR REPLACE FUNCTION noeta_model_throttled(p_keys text[], p_seconds double precision)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM FROM model_limits AS m WHERE m.key = ANY (p_keys) ORDER BY m.key FOR UPDATE;
    UPDATE model_limits SET throttled = throttled + 1,
           paused_until = CASE WHEN p_seconds IS NULL THEN paused_until ELSE
               greatest(paused_until, clock_timestamp() + p_seconds * interval '1 second') END,
           updated_at = clock_timestamp()
     WHERE key = ANY (p_keys);
END $$;

-- 10. A held model-limit slot (0012) goes when its task finishes: the attempt that would
-- have taken it never comes. (The trigger of 0010 that sets finished_at runs exactly
-- then; the delete is one probe of a small table's key.)
CREATE OR REPLACE FUNCTION noeta_mark_finished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.finished_at := CASE WHEN NEW.status IN ('done', 'failed', 'cancelled')
                            THEN coalesce(NEW.updated_at, clock_timestamp()) END;
    IF NEW.finished_at IS NOT NULL THEN
        DELETE FROM model_limit_holds WHERE task_id = NEW.id;
    END IF;
    RETURN NEW;
END $$;

-- Those left by finished and pruned tasks before this migration.
DELETE FROM model_limit_holds AS h
 WHERE NOT EXISTS (SELECT 1 FROM tasks AS t WHERE t.id = h.task_id
                      AND t.status IN ('ready', 'running', 'holding', 'waiting'));

-- 10. A prune batch is bounded by events as well as tasks (p_event_limit, counted by each
-- task's last_seq): one task with millions of events no longer makes every batch time
-- out for ever. The oldest tasks go whole while their events fit; when the oldest alone
-- has more, its log goes p_event_limit events at a time from the top, and its row and
-- everything else that names it with the last part. Held model-limit slots go too.
-- `more`: a bound cut the batch, so another may find more.
CREATE FUNCTION noeta_prune_finished(
    p_before timestamptz, p_queue text, p_limit int, p_keep_ids boolean,
    p_event_limit bigint, OUT tasks_pruned int, OUT events_pruned bigint, OUT more boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_ids text[];
    v_oldest text;
    v_left bigint;
    v_picked int;
BEGIN
    tasks_pruned := 0;
    events_pruned := 0;
    more := false;
    WITH picked AS MATERIALIZED (
        SELECT t.id, t.finished_at, t.last_seq FROM tasks t
         WHERE t.finished_at < p_before
           AND (p_queue IS NULL OR t.queue = p_queue)
           AND noeta_may_prune(t.id)
         ORDER BY t.finished_at
         LIMIT p_limit
         FOR UPDATE OF t SKIP LOCKED)
    SELECT array_agg(c.id) FILTER (WHERE c.events_so_far <= p_event_limit),
           min(c.id) FILTER (WHERE c.n = 1), count(*)
      INTO v_ids, v_oldest, v_picked
      FROM (SELECT p.id, sum(p.last_seq) OVER w AS events_so_far, row_number() OVER w AS n
              FROM picked AS p WINDOW w AS (ORDER BY p.finished_at, p.id)) AS c;
    IF v_ids IS NULL AND v_oldest IS NOT NULL THEN
        SELECT max(e.seq) INTO v_left FROM events e WHERE e.task_id = v_oldest;
        IF v_left > p_event_limit THEN
            DELETE FROM events e WHERE e.task_id = v_oldest AND e.seq > v_left - p_event_limit;
            GET DIAGNOSTICS events_pruned = ROW_COUNT;
            more := true;
            RETURN;
        END IF;
        v_ids := ARRAY[v_oldest];
    END IF;
    tasks_pruned := coalesce(cardinality(v_ids), 0);
    more := v_picked = p_limit OR tasks_pruned < v_picked;
    IF tasks_pruned = 0 THEN
        RETURN;
    END IF;
    DELETE FROM events WHERE task_id = ANY (v_ids);
    GET DIAGNOSTICS events_pruned = ROW_COUNT;
    DELETE FROM inbox WHERE task_id = ANY (v_ids);
    DELETE FROM snapshots WHERE task_id = ANY (v_ids);
    DELETE FROM late_results WHERE task_id = ANY (v_ids);
    DELETE FROM cron_fires WHERE task_id = ANY (v_ids);
    DELETE FROM model_limit_holds WHERE task_id = ANY (v_ids);
    IF p_keep_ids THEN
        INSERT INTO pruned_task_ids (id) SELECT unnest(v_ids) ON CONFLICT (id) DO NOTHING;
    END IF;
    DELETE FROM tasks WHERE id = ANY (v_ids);
END $$;

-- The prune of an older noeta, with the bound of noeta/core/retention.py.
CREATE OR REPLACE FUNCTION noeta_prune_finished(
    p_before timestamptz, p_queue text, p_limit int, p_keep_ids boolean,
    OUT tasks_pruned int, OUT events_pruned bigint)
LANGUAGE sql AS $$
    SELECT tasks_pruned, events_pruned
      FROM noeta_prune_finished(p_before, p_queue, p_limit, p_keep_ids, 20000)
$$;


-- 9. The tasks an append creates are the appending task's subtasks: they carry its
-- concurrency key and priority, so a tenant keeps its per-key limit (and its place)
-- through Agent. The fenced append of 0008 otherwise unchanged.
CREATE OR REPLACE FUNCTION noeta_append(
    p_task text, p_epoch bigint, p_expected_seq bigint,
    p_types text[], p_data text[],
    p_take bigint[],
    p_next text, p_until timestamptz, p_wake_prefix text,
    p_new_ids text[], p_new_queues text[], p_new_ready timestamptz[],
    p_new_counts int[], p_new_types text[], p_new_data text[],
    p_deliver_tasks text[], p_deliver_keys text[], p_deliver_payloads text[])
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz;
    v_seq bigint;
    v_taken bigint;
    v_first int := 1;
    v_key text;           -- the subtasks' concurrency key and priority: the parent's
    v_priority integer;
    i int;
BEGIN
    v_now := noeta_fence(p_task, p_epoch, p_expected_seq);
    v_seq := p_expected_seq + coalesce(cardinality(p_types), 0);
    -- The fence holds the task row's lock: its owner is the claim's owner.
    INSERT INTO events (task_id, seq, type, data, epoch, owner)
        SELECT p_task, p_expected_seq + e.ord, e.type, e.data, p_epoch,
               (SELECT owner FROM tasks WHERE id = p_task)
          FROM unnest(p_types, p_data) WITH ORDINALITY AS e(type, data, ord);

    IF cardinality(p_take) > 0 THEN
        UPDATE inbox SET taken_seq = v_seq
         WHERE id = ANY (p_take) AND task_id = p_task AND taken_seq IS NULL;
        GET DIAGNOSTICS v_taken = ROW_COUNT;
        IF v_taken <> cardinality(p_take) THEN
            RAISE EXCEPTION USING ERRCODE = 'NT409',
                MESSAGE = 'an inbox entry to take is already taken or not this task''s';
        END IF;
    END IF;

    IF cardinality(p_new_ids) > 0 THEN
        SELECT concurrency_key, priority INTO v_key, v_priority FROM tasks WHERE id = p_task;
    END IF;
    FOR i IN 1 .. coalesce(cardinality(p_new_ids), 0) LOOP
        PERFORM noeta_create_task(p_new_ids[i], p_new_queues[i], p_new_ready[i],
                                  p_new_types[v_first:v_first + p_new_counts[i] - 1],
                                  p_new_data[v_first:v_first + p_new_counts[i] - 1],
                                  v_key, v_priority);
        v_first := v_first + p_new_counts[i];
    END LOOP;

    FOR i IN 1 .. coalesce(cardinality(p_deliver_tasks), 0) LOOP
        PERFORM noeta_deliver(p_deliver_tasks[i], p_deliver_keys[i], p_deliver_payloads[i]);
    END LOOP;

    CASE p_next
    WHEN 'continue' THEN
        -- From holding too: the wait is over, the task runs again under the same claim.
        UPDATE tasks SET last_seq = v_seq, status = 'running', updated_at = v_now
         WHERE id = p_task;
    WHEN 'wait_holding' THEN
        UPDATE tasks SET last_seq = v_seq, status = 'holding', updated_at = v_now
         WHERE id = p_task;
    WHEN 'wait' THEN
        -- A delivery that arrived while the task ran must not be slept through.
        UPDATE tasks SET last_seq = v_seq, status = 'waiting', lease_until = NULL,
               ready_at = p_until, wake_prefix = p_wake_prefix,
               claimable_at = CASE
                   WHEN EXISTS (SELECT 1 FROM inbox
                                 WHERE task_id = p_task AND taken_seq IS NULL
                                   AND (p_wake_prefix IS NULL OR
                                        starts_with(coalesce(dedupe_key, ''), p_wake_prefix)
                                        OR dedupe_key = 'cancel'))
                   THEN v_now
                   ELSE p_until END,
               updated_at = v_now
         WHERE id = p_task;
    WHEN 'done', 'failed', 'cancelled' THEN
        UPDATE tasks SET last_seq = v_seq, status = p_next, lease_until = NULL,
               ready_at = NULL, claimable_at = NULL, updated_at = v_now
         WHERE id = p_task;
    END CASE;
    RETURN v_seq;
END $$;

-- 9. A batch of tasks with each task's concurrency key and priority (p_keys, p_priorities
-- beside p_ids); otherwise noeta_create_tasks of 0010, which an older client still calls.
CREATE FUNCTION noeta_create_tasks(
    p_ids text[], p_queues text[], p_ready timestamptz[], p_counts int[],
    p_event_task int[], p_event_seq int[], p_types text[], p_data text[],
    p_keys text[], p_priorities int[])
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    v_created text[];
    v_taken text;
BEGIN
    WITH inserted AS (
        INSERT INTO tasks (id, queue, status, ready_at, claimable_at, last_seq,
                           concurrency_key, priority)
            SELECT t.id, t.queue, 'ready', t.ready, coalesce(t.ready, clock_timestamp()),
                   t.count, t.key, t.priority
              FROM unnest(p_ids, p_queues, p_ready, p_counts, p_keys, p_priorities)
                   AS t(id, queue, ready, count, key, priority)
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
END $$;


-- 9. A cron fire creates its task with the concurrency key and priority its schedule
-- gives (a cron file's `key:` and `priority:`); otherwise noeta_cron_fire of 0006, which
-- an older scheduler still calls.
CREATE FUNCTION noeta_cron_fire(
    p_schedule text, p_slot timestamptz, p_kind text, p_overlap text, p_detail text,
    p_task text, p_queue text, p_types text[], p_data text[], p_key text, p_payload text,
    p_concurrency_key text, p_priority integer)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_last text;
    v_status text;
    v_outcome text;
    v_detail text := p_detail;
BEGIN
    INSERT INTO cron_fires (schedule, slot, outcome) VALUES (p_schedule, p_slot, 'missed')
        ON CONFLICT (schedule, slot) DO NOTHING;
    IF NOT FOUND THEN
        RETURN 'already';
    END IF;
    INSERT INTO cron_schedules (name, mark) VALUES (p_schedule, p_slot)
        ON CONFLICT (name) DO NOTHING;
    SELECT last_task INTO v_last FROM cron_schedules WHERE name = p_schedule FOR UPDATE;

    IF p_kind = 'missed' THEN
        v_outcome := 'missed';
    ELSIF p_kind = 'task' THEN
        SELECT status INTO v_status FROM tasks WHERE id = v_last;
        IF p_overlap = 'skip' AND v_status IN ('ready', 'running', 'holding', 'waiting') THEN
            v_outcome := 'skipped_overlap';
            v_detail := format('task %s is still %s', v_last, v_status);
        ELSE
            PERFORM noeta_create_task(p_task, p_queue, NULL, p_types, p_data,
                                      p_concurrency_key, p_priority);
            v_outcome := 'created';
            UPDATE cron_schedules SET last_task = p_task WHERE name = p_schedule;
        END IF;
    ELSE
        SELECT status INTO v_status FROM tasks WHERE id = p_task;
        IF v_status IS NULL OR v_status IN ('done', 'failed', 'cancelled') THEN
            v_outcome := 'no_target';
            v_detail := format('task %s %s', p_task,
                               CASE WHEN v_status IS NULL THEN 'does not exist'
                                    ELSE 'is ' || v_status END);
        ELSIF p_overlap = 'skip' AND EXISTS (
                SELECT 1 FROM inbox
                 WHERE task_id = p_task AND taken_seq IS NULL
                   AND starts_with(coalesce(dedupe_key, ''), 'cron:' || p_schedule || ':')) THEN
            v_outcome := 'skipped_overlap';
            v_detail := 'the previous message is not taken yet';
        ELSE
            PERFORM noeta_deliver(p_task, p_key, p_payload);
            v_outcome := 'delivered';
        END IF;
    END IF;

    UPDATE cron_fires
       SET outcome = v_outcome, detail = coalesce(v_detail, ''),
           task_id = CASE WHEN p_kind = 'missed'
                               OR (p_kind = 'task' AND v_outcome = 'skipped_overlap')
                          THEN NULL ELSE p_task END
     WHERE schedule = p_schedule AND slot = p_slot;
    UPDATE cron_schedules SET mark = GREATEST(mark, p_slot) WHERE name = p_schedule;
    RETURN v_outcome;
END $$;
