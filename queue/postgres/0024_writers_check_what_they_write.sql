-- A task's writes pay for no check their writers already make (issue 28 item 1, ADR-0095).
--
-- The events foreign key checked, for every event row, that its task exists: one lookup
-- of tasks a row (bench/row_costs.py: about 30 us of server time per event row, 5 rows a
-- one-shot task), made inside a statement that has just locked that very task row (the
-- fenced appends) or created it (the creates). Every writer of events is one of those
-- functions; the prune deletes a task's events with it. The key is dropped; what it
-- checked, the writers check, and tests/stores/test_postgres_lean_writes.py holds them
-- to it.
ALTER TABLE events DROP CONSTRAINT events_task_id_fkey;

-- finished_at (and dropping the task's model-limit hold) is done by the finishing appends
-- themselves, noeta_append_and_finish and noeta_append_batch: every one-shot task finishes
-- through one of them, and the trigger's run cost about 20 us a finish. The trigger stays
-- for every other move into or out of a finished state (cancels, noeta_append's finishing
-- form, a resume), and leaves alone an update that sets finished_at itself. The same two
-- appends announce a finish inline (noeta_announce_finish's two statements): no function
-- run besides the append for a task's finish.
DROP TRIGGER tasks_mark_finished ON tasks;
CREATE TRIGGER tasks_mark_finished BEFORE UPDATE OF status ON tasks FOR EACH ROW WHEN (old.status IS DISTINCT FROM new.status AND ((new.status = ANY (ARRAY['done'::text, 'failed'::text, 'cancelled'::text])) OR (old.status = ANY (ARRAY['done'::text, 'failed'::text, 'cancelled'::text]))) AND NOT old.finished_at IS DISTINCT FROM new.finished_at) EXECUTE FUNCTION noeta_mark_finished();

CREATE OR REPLACE FUNCTION noeta_mark_finished()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    -- Every move into or out of done, failed or cancelled that does not set finished_at
    -- itself (the finishing appends do, and drop the hold: 0024) comes through here.
    NEW.finished_at := CASE WHEN NEW.status IN ('done', 'failed', 'cancelled')
                            THEN coalesce(NEW.updated_at, clock_timestamp()) END;
    IF NEW.finished_at IS NOT NULL THEN
        DELETE FROM model_limit_holds WHERE task_id = NEW.id;
    END IF;
    RETURN NEW;
END $function$;

CREATE OR REPLACE FUNCTION noeta_append_and_finish(p_task text, p_epoch bigint, p_expected_seq bigint, p_events jsonb, p_status text)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
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
    -- finished_at and the hold are set here, not by tasks_mark_finished: a trigger run
    -- less per finish. The trigger skips an update that sets finished_at itself (0024).
    UPDATE tasks SET last_seq = v_seq, status = p_status, lease_until = NULL,
           ready_at = NULL, claimable_at = NULL, updated_at = v_now, finished_at = v_now
     WHERE id = p_task;
    DELETE FROM model_limit_holds WHERE task_id = p_task;
    -- noeta_announce_finish's two statements, inline (a function run less per finish):
    -- announced only to a client awaiting it, whose mark takes this row's lock too.
    DELETE FROM finish_waiters WHERE task_id = p_task;
    IF FOUND THEN
        PERFORM pg_notify('noeta_finished', p_task);
    END IF;
    RETURN v_seq;
END $function$;

CREATE OR REPLACE FUNCTION noeta_append_batch(p_items jsonb)
 RETURNS TABLE(item integer, appended_seq bigint, refusal_code text, refusal_message text)
 LANGUAGE plpgsql
AS $function$
DECLARE
    i record;
    t record;
    v_now timestamptz;
BEGIN
    -- The rows are locked in task-id order: two batches naming the same tasks (a stale
    -- claim's and its successor's) wait for each other, never in a cycle.
    -- One JSON array of items (one parameter: no array of texts to escape per character
    -- in the client); an item without "status" keeps running, one without "model_keys"
    -- is no model call.
    FOR i IN SELECT u.ord::integer AS ord, u.item->>'task' AS task,
                    (u.item->>'epoch')::bigint AS epoch,
                    (u.item->>'expected_seq')::bigint AS expected_seq,
                    u.item->'events' AS events, u.item->>'status' AS status,
                    u.item->'model_keys' AS model_keys
               FROM jsonb_array_elements(p_items) WITH ORDINALITY AS u(item, ord)
              ORDER BY task, u.ord LOOP
        item := i.ord;
        appended_seq := NULL;
        refusal_code := NULL;
        refusal_message := NULL;
        IF i.status IS NOT NULL AND i.status NOT IN ('done', 'failed', 'cancelled') THEN
            RAISE EXCEPTION 'noeta_append_batch: % is not a finished status', i.status;
        END IF;
        -- A model call a limit applies to is not the batch's: the caller sends it alone
        -- (noeta_append_model_called), which takes the budget. Where none applies, the
        -- ModelCalled append is a plain continue.
        IF i.model_keys IS NOT NULL AND EXISTS (
               SELECT 1 FROM model_limits m
                WHERE m.key IN (SELECT jsonb_array_elements_text(i.model_keys))) THEN
            refusal_code := 'limited';
            RETURN NEXT;
            CONTINUE;
        END IF;
        -- The fence, as noeta_fence checks it, with its messages; told, not raised.
        SELECT owner, owner_epoch, status, lease_until, last_seq INTO t
          FROM tasks WHERE id = i.task FOR UPDATE;
        IF NOT FOUND THEN
            refusal_code := 'NT404';
            refusal_message := i.task;
            RETURN NEXT;
            CONTINUE;
        END IF;
        v_now := clock_timestamp();
        IF t.owner_epoch <> i.epoch THEN
            refusal_code := 'NT409';
            refusal_message := format(
                'claimed again since (epoch %s, this claim has %s)', t.owner_epoch, i.epoch);
        ELSIF t.status NOT IN ('running', 'holding') THEN
            refusal_code := 'NT409';
            refusal_message := format('not held by this claim (status %s)', t.status);
        ELSIF t.lease_until <= v_now THEN
            refusal_code := 'NT409';
            refusal_message := 'the lease has expired';
        ELSIF t.last_seq <> i.expected_seq THEN
            refusal_code := 'NT409';
            refusal_message := format(
                'the log ends at seq %s, not %s', t.last_seq, i.expected_seq);
        END IF;
        IF refusal_code IS NOT NULL THEN
            RETURN NEXT;
            CONTINUE;
        END IF;
        appended_seq := i.expected_seq + jsonb_array_length(i.events);
        INSERT INTO events (task_id, seq, type, data, epoch, owner)
            SELECT i.task, i.expected_seq + e.ord, e.pair->>0, e.pair->>1, i.epoch, t.owner
              FROM jsonb_array_elements(i.events) WITH ORDINALITY AS e(pair, ord);
        IF i.status IS NULL THEN
            UPDATE tasks SET last_seq = appended_seq, status = 'running', updated_at = v_now
             WHERE id = i.task;
        ELSE
            -- finished_at and the hold here, as noeta_append_and_finish does (0024).
            UPDATE tasks SET last_seq = appended_seq, status = i.status, lease_until = NULL,
                   ready_at = NULL, claimable_at = NULL, updated_at = v_now,
                   finished_at = v_now
             WHERE id = i.task;
            DELETE FROM model_limit_holds WHERE task_id = i.task;
            -- Announced only to a client awaiting it: noeta_announce_finish's two
            -- statements, inline as in noeta_append_and_finish (0024).
            DELETE FROM finish_waiters WHERE task_id = i.task;
            IF FOUND THEN
                PERFORM pg_notify('noeta_finished', i.task);
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END $function$;
