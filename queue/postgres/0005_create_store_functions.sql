-- The store's writes as functions, so that each is one statement: one round trip, and
-- its own transaction (the client runs in autocommit). Fewer round trips is most of the
-- throughput at one client (POSTGRES-FACTS.md). Errors they raise:
--   NT409  conflict: the write was refused and nothing was written (noeta Conflict)
--   NT404  no such task (noeta UnknownTask)
-- Lock order, everywhere: the task being written first, then other tasks' rows in id
-- order (the client sorts deliveries). A deadlock despite that (two tasks delivering to
-- each other) rolls one statement back; the client re-runs it, checks included.

-- Creates a task with its first events; false if a task with that id exists already
-- (creation is idempotent by id).
CREATE FUNCTION noeta_create_task(
    p_id text, p_queue text, p_ready timestamptz, p_types text[], p_data text[])
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tasks (id, queue, status, ready_at, claimable_at, last_seq)
        VALUES (p_id, p_queue, 'ready', p_ready, coalesce(p_ready, clock_timestamp()),
                coalesce(cardinality(p_types), 0))
        ON CONFLICT (id) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO events (task_id, seq, type, data)
        SELECT p_id, e.ord, e.type, e.data
          FROM unnest(p_types, p_data) WITH ORDINALITY AS e(type, data, ord);
    RETURN true;
END $$;

-- Puts one delivery in a task's inbox and makes a waiting task claimable. Locks the
-- task row first, so it is ordered with appends and claims of that task.
CREATE FUNCTION noeta_deliver(p_task text, p_key text, p_payload text)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_status text;
    v_prefix text;
    v_inserted boolean;
BEGIN
    SELECT status, wake_prefix INTO v_status, v_prefix FROM tasks WHERE id = p_task FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'NT404', MESSAGE = p_task;
    END IF;
    INSERT INTO inbox (task_id, dedupe_key, payload) VALUES (p_task, p_key, p_payload)
        ON CONFLICT (task_id, dedupe_key) DO NOTHING;
    v_inserted := FOUND;
    IF v_inserted AND v_status = 'waiting'
       AND (v_prefix IS NULL OR starts_with(coalesce(p_key, ''), v_prefix)
            OR p_key = 'cancel') THEN  -- a cancel request wakes any wait
        UPDATE tasks
           SET claimable_at = LEAST(coalesce(claimable_at, 'infinity'), clock_timestamp()),
               updated_at = clock_timestamp()
         WHERE id = p_task;
    END IF;
    RETURN v_inserted;
END $$;

-- The fence: lock the task row, then check the claim's epoch, the lease and the log's
-- last seq. Raises NT409 (or NT404) and writes nothing unless all hold. Returns the
-- time of the check: clock_timestamp(), not now(), as the lock wait may have been long.
CREATE FUNCTION noeta_fence(p_task text, p_epoch bigint, p_expected_seq bigint)
RETURNS timestamptz LANGUAGE plpgsql AS $$
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
END $$;

-- The common append: events only, the task keeps running. Five parameters instead of
-- seventeen: the client's cost per append is most of the cost at one client.
CREATE FUNCTION noeta_append_events(
    p_task text, p_epoch bigint, p_expected_seq bigint, p_types text[], p_data text[])
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := noeta_fence(p_task, p_epoch, p_expected_seq);
    v_seq bigint := p_expected_seq + coalesce(cardinality(p_types), 0);
BEGIN
    INSERT INTO events (task_id, seq, type, data)
        SELECT p_task, p_expected_seq + e.ord, e.type, e.data
          FROM unnest(p_types, p_data) WITH ORDINALITY AS e(type, data, ord);
    UPDATE tasks SET last_seq = v_seq, status = 'running', updated_at = v_now
     WHERE id = p_task;
    RETURN v_seq;
END $$;

-- The fenced append: lock the task row, check epoch, lease and expected seq, then write
-- events, take inbox entries, create tasks, deliver, and set the next state. All or
-- nothing. Returns the new last seq.
CREATE FUNCTION noeta_append(
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
    i int;
BEGIN
    v_now := noeta_fence(p_task, p_epoch, p_expected_seq);
    v_seq := p_expected_seq + coalesce(cardinality(p_types), 0);
    INSERT INTO events (task_id, seq, type, data)
        SELECT p_task, p_expected_seq + e.ord, e.type, e.data
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

    FOR i IN 1 .. coalesce(cardinality(p_new_ids), 0) LOOP
        PERFORM noeta_create_task(p_new_ids[i], p_new_queues[i], p_new_ready[i],
                                  p_new_types[v_first:v_first + p_new_counts[i] - 1],
                                  p_new_data[v_first:v_first + p_new_counts[i] - 1]);
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

-- Prompt wake-ups: when a task becomes claimable now (created, released, woken by a
-- delivery, handed back with a delivery waiting), idle workers hear of it at once on
-- channel noeta_wake instead of at their next poll (the poll stays, as the safety net).
-- The payload is the queue name only: any role can LISTEN on any channel.
CREATE FUNCTION noeta_notify_claimable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('noeta_wake', NEW.queue);
    RETURN NULL;
END $$;

CREATE TRIGGER tasks_notify_claimable
    AFTER INSERT OR UPDATE OF claimable_at, status ON tasks
    FOR EACH ROW
    WHEN (NEW.status IN ('ready', 'waiting') AND NEW.claimable_at <= clock_timestamp())
    EXECUTE FUNCTION noeta_notify_claimable();
