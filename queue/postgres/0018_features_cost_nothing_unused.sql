-- Features cost nothing where they are unused (issue 28 item 1).
--
-- tasks_mark_finished ran on every change of status: a claim (ready -> running), a wait,
-- a hand-back, each ran noeta_mark_finished to set finished_at to what it already was
-- (NULL). It now runs only where finished_at changes: into a finished state, or out of
-- one (a finished task resumed). One plpgsql run less per claim and per wait.
DROP TRIGGER tasks_mark_finished ON tasks;
CREATE TRIGGER tasks_mark_finished BEFORE UPDATE OF status ON tasks FOR EACH ROW WHEN (old.status IS DISTINCT FROM new.status AND ((new.status = ANY (ARRAY['done'::text, 'failed'::text, 'cancelled'::text])) OR (old.status = ANY (ARRAY['done'::text, 'failed'::text, 'cancelled'::text])))) EXECUTE FUNCTION noeta_mark_finished();

-- noeta_append_model_called (and its twin keeping the claim) also says whether a limit
-- applied to the call: only then does the worker send the reply's real tokens to correct
-- the estimate (noeta_model_tokens_used). Without limits, one statement less per model
-- call. A new OUT column changes the function's type: dropped and made again.
DROP FUNCTION noeta_append_model_called_keeping_claim(text, bigint, bigint, jsonb, text[], bigint);
DROP FUNCTION noeta_append_model_called(text, bigint, bigint, jsonb, text[], bigint);
CREATE OR REPLACE FUNCTION noeta_append_model_called(p_task text, p_epoch bigint, p_expected_seq bigint, p_events jsonb, p_keys text[], p_tokens bigint, OUT seq bigint, OUT retry_at timestamp with time zone, OUT limit_key text, OUT limited boolean)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
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
    -- Told to the caller: where no limit applies, the reply's real tokens need no
    -- correction, and it sends none (issue 28).
    limited := v_limited;
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
END $function$;
CREATE OR REPLACE FUNCTION noeta_append_model_called_keeping_claim(p_task text, p_epoch bigint, p_expected_seq bigint, p_events jsonb, p_keys text[], p_tokens bigint, OUT seq bigint, OUT retry_at timestamp with time zone, OUT limit_key text, OUT limited boolean)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
DECLARE
    held record;
BEGIN
    -- The row as the claim holds it, locked first, as the fence inside locks it (the
    -- same order as every append: the task row, then the limit rows).
    SELECT status, lease_until, ready_at INTO held FROM tasks WHERE id = p_task FOR UPDATE;
    SELECT a.seq, a.retry_at, a.limit_key, a.limited INTO seq, retry_at, limit_key, limited
      FROM noeta_append_model_called(
          p_task, p_epoch, p_expected_seq, p_events, p_keys, p_tokens) AS a;
    IF seq IS NULL THEN  -- refused, and handed back: the claim is given its row again
        UPDATE tasks SET status = held.status, lease_until = held.lease_until,
               claimable_at = held.lease_until, ready_at = held.ready_at
         WHERE id = p_task;
    END IF;
END $function$;

-- tasks_keep_pruned_ids_taken ran noeta_skip_pruned_id at every create (three index
-- probes: two of pruned_task_ids, one of tasks) though no id was ever kept where
-- retention is not used. It is off while pruned_task_ids is empty; the first prune that
-- keeps ids turns it on, in its own transaction, before it keeps any (the table lock
-- that takes waits for every create in flight). One plpgsql run less per create.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pruned_task_ids) THEN
        ALTER TABLE tasks DISABLE TRIGGER tasks_keep_pruned_ids_taken;
    END IF;
END $$;
CREATE OR REPLACE FUNCTION noeta_prune_finished(p_before timestamp with time zone, p_queue text, p_limit integer, p_keep_ids boolean, OUT tasks_pruned integer, OUT events_pruned bigint)
 RETURNS record
 LANGUAGE sql
AS $function$
    SELECT tasks_pruned, events_pruned
      FROM noeta_prune_finished(p_before, p_queue, p_limit, p_keep_ids, 20000)
$function$;

CREATE OR REPLACE FUNCTION noeta_prune_finished(p_before timestamp with time zone, p_queue text, p_limit integer, p_keep_ids boolean, p_event_limit bigint, OUT tasks_pruned integer, OUT events_pruned bigint, OUT more boolean)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_ids text[];
    v_oldest text;
    v_left bigint;
    v_picked int;
BEGIN
    tasks_pruned := 0;
    events_pruned := 0;
    more := false;
    -- The first prune that keeps ids turns on the check of kept ids at every create
    -- (0018: off while none is kept). First, before any row lock: the table lock it
    -- takes waits for every write in flight, so no create misses an id kept here.
    IF p_keep_ids AND EXISTS (SELECT FROM pg_trigger
                               WHERE tgrelid = 'tasks'::regclass
                                 AND tgname = 'tasks_keep_pruned_ids_taken'
                                 AND tgenabled = 'D') THEN
        IF NOT pg_has_role((SELECT relowner FROM pg_class WHERE oid = 'tasks'::regclass),
                           'MEMBER') THEN  -- as the DELETE below would say
            RAISE EXCEPTION 'permission denied for table tasks'
                  USING ERRCODE = 'insufficient_privilege';
        END IF;
        ALTER TABLE tasks ENABLE TRIGGER tasks_keep_pruned_ids_taken;
    END IF;
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
END $function$;
