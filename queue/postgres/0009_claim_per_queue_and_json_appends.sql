-- Claims walk each queue's own due-time order, and the common appends take their events as
-- one jsonb parameter (ADR-0060).

-- The claim index per queue. tasks_claimable orders every queue's rows by due time, and a
-- claim for queue A walked past every due row of queue B (a backlog in one queue slowed
-- the claims of all). This one starts each queue's walk at its own oldest due row; the
-- claim reads it per queue (LATERAL over the worker's queues) and orders what it found.
-- tasks_claimable stays: the scheduler's wake-up (every queue, by due time) reads it.
CREATE INDEX tasks_claimable_in_queue ON tasks (queue, claimable_at)
    WHERE claimable_at IS NOT NULL;

-- The events of an append as one jsonb array of [type, data] pairs, data being the event's
-- encoded JSON text as a JSON string: one parameter the client builds in one call, instead
-- of two text[] arrays it escaped element by element. (jsonb holds the encoded text as a
-- string, so `\u0000` and lone surrogates inside it stay escaped, exactly as stored.)
-- Written under the fence the caller just passed, which holds the task row's lock: the
-- owner is the claim's owner. Returns the new last seq. (plpgsql: its plan is cached for
-- the session; a LANGUAGE sql function's is planned again on every call before 18.)
CREATE FUNCTION noeta_insert_events(p_task text, p_epoch bigint, p_after bigint,
                                    p_events jsonb)
RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO events (task_id, seq, type, data, epoch, owner)
        SELECT p_task, p_after + e.ord, e.pair->>0, e.pair->>1, p_epoch,
               (SELECT owner FROM tasks WHERE id = p_task)
          FROM jsonb_array_elements(p_events) WITH ORDINALITY AS e(pair, ord);
    RETURN p_after + jsonb_array_length(p_events);
END $$;

-- The common append: events only, the task keeps running. Fenced like every write.
CREATE FUNCTION noeta_append_and_continue(
    p_task text, p_epoch bigint, p_expected_seq bigint, p_events jsonb)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := noeta_fence(p_task, p_epoch, p_expected_seq);
    v_seq bigint := noeta_insert_events(p_task, p_epoch, p_expected_seq, p_events);
BEGIN
    UPDATE tasks SET last_seq = v_seq, status = 'running', updated_at = v_now
     WHERE id = p_task;
    RETURN v_seq;
END $$;

-- The finishing append with nothing else to do (no inbox entry to take, nothing to
-- deliver or create: a one-shot task's last append): five parameters, not eighteen. It
-- tells clients waiting on the task (`result`) on channel noeta_finished, at its commit.
CREATE FUNCTION noeta_append_and_finish(
    p_task text, p_epoch bigint, p_expected_seq bigint, p_events jsonb, p_status text)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := noeta_fence(p_task, p_epoch, p_expected_seq);
    v_seq bigint;
BEGIN
    IF p_status NOT IN ('done', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'noeta_append_and_finish: % is not a finished status', p_status;
    END IF;
    v_seq := noeta_insert_events(p_task, p_epoch, p_expected_seq, p_events);
    UPDATE tasks SET last_seq = v_seq, status = p_status, lease_until = NULL,
           ready_at = NULL, claimable_at = NULL, updated_at = v_now
     WHERE id = p_task;
    PERFORM pg_notify('noeta_finished', p_task);
    RETURN v_seq;
END $$;
