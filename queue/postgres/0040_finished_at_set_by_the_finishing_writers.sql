-- finished_at is set by the writers that finish a task, not by a trigger (issue 28 item 1,
-- ADR-0143; supersedes the part of ADR-0095 that kept tasks_mark_finished).
--
-- tasks_mark_finished (BEFORE UPDATE OF status) fired on no hot path since 0024, but its
-- WHEN was read from its stored text and compiled again by every statement that updates
-- tasks' status: every claim, every finish, every hand-back (docs/scaling.md, "The job
-- claim on the server, line by line": 7 % of a lone claim's backend CPU). The writers that
-- relied on it now set finished_at themselves: noeta_append's finishing form (which also
-- drops the task's model-limit hold, the trigger's second job) and noeta_create_unique_task's
-- cancel of a debounced job. tasks_mark_created_finished (BEFORE INSERT) goes too: no
-- create writes a finished row.
--
-- What guarded a forgetful writer is now the table itself: the CHECK that a finished task
-- is never claimable also says a task has finished_at exactly when it is finished. It
-- replaces that CHECK rather than adding a fifth, since each CHECK is compiled again by
-- every UPDATE of tasks. Rows that disagree (none that noeta wrote) are mended first.

DROP TRIGGER tasks_mark_finished ON tasks;
DROP TRIGGER tasks_mark_created_finished ON tasks;
DROP FUNCTION noeta_mark_finished();

UPDATE tasks SET finished_at = updated_at
 WHERE status IN ('done', 'failed', 'cancelled') AND finished_at IS NULL;
UPDATE tasks SET finished_at = NULL
 WHERE status NOT IN ('done', 'failed', 'cancelled') AND finished_at IS NOT NULL;

ALTER TABLE tasks DROP CONSTRAINT finished_tasks_are_never_claimable;
ALTER TABLE tasks ADD CONSTRAINT finished_tasks_have_finished_at_and_no_claim CHECK (
    CASE WHEN status IN ('done', 'failed', 'cancelled')
         THEN finished_at IS NOT NULL AND claimable_at IS NULL
         ELSE finished_at IS NULL END);

CREATE OR REPLACE FUNCTION noeta_append(p_task text, p_epoch bigint, p_expected_seq bigint, p_types text[], p_data text[], p_take bigint[], p_next text, p_until timestamp with time zone, p_wake_prefix text, p_new_ids text[], p_new_queues text[], p_new_ready timestamp with time zone[], p_new_counts integer[], p_new_types text[], p_new_data text[], p_deliver_tasks text[], p_deliver_keys text[], p_deliver_payloads text[])
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now timestamptz;
    v_seq bigint;
    v_taken bigint;
    v_first int := 1;
    v_key text;           -- the subtasks' concurrency key and priority: the parent's
    v_priority integer;
    v_pinned boolean := false;
    v_needs text[];
    i int;
BEGIN
    v_now := noeta_fence(p_task, p_epoch, p_expected_seq);
    v_seq := p_expected_seq + coalesce(cardinality(p_types), 0);
    -- The fence holds the task row's lock: its owner is the claim's owner.
    INSERT INTO events (task_id, seq, type, data, epoch, owner)
        SELECT p_task, p_expected_seq + e.ord, e.type, e.data, p_epoch,
               (SELECT owner FROM tasks WHERE id = p_task)
          FROM unnest(p_types, p_data) WITH ORDINALITY AS e(type, data, ord);
    -- needs (0025): the plugin names of its latest pin, sorted, each once, written by the
    -- append's own update of the row below: no trigger, no second update of the row.
    IF 'PluginsPinned' = ANY (p_types) THEN
        v_pinned := true;
        SELECT array_agg(DISTINCT pin ->> 0 ORDER BY pin ->> 0) INTO v_needs
          FROM json_array_elements((
              SELECT e.data::json -> 'pins'
                FROM unnest(p_types, p_data) WITH ORDINALITY AS e(type, data, ord)
               WHERE e.type = 'PluginsPinned' ORDER BY e.ord DESC LIMIT 1)) AS pin;
    END IF;

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
        UPDATE tasks SET last_seq = v_seq, status = 'running', updated_at = v_now,
               needs = CASE WHEN v_pinned THEN v_needs ELSE needs END
         WHERE id = p_task;
    WHEN 'wait_holding' THEN
        UPDATE tasks SET last_seq = v_seq, status = 'holding', updated_at = v_now,
               needs = CASE WHEN v_pinned THEN v_needs ELSE needs END
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
               updated_at = v_now,
               needs = CASE WHEN v_pinned THEN v_needs ELSE needs END
         WHERE id = p_task;
    WHEN 'done', 'failed', 'cancelled' THEN
        -- finished_at and the hold here, as every finishing writer does (0040, ADR-0143):
        -- no trigger sets them, and the table's CHECK refuses a finish without the time.
        UPDATE tasks SET last_seq = v_seq, status = p_next, lease_until = NULL,
               ready_at = NULL, claimable_at = NULL, updated_at = v_now, finished_at = v_now,
               needs = CASE WHEN v_pinned THEN v_needs ELSE needs END
         WHERE id = p_task;
        DELETE FROM model_limit_holds WHERE task_id = p_task;
    END CASE;
    RETURN v_seq;
END $function$;

CREATE OR REPLACE FUNCTION noeta_create_unique_task(p_id text, p_queue text, p_ready timestamp with time zone, p_types text[], p_data text[], p_key text, p_priority integer, p_job text, p_unique_key text, p_unique_for interval, p_debounce interval)
 RETURNS text
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_holder text;
    v_until timestamptz;
    v_now timestamptz;
    v_seq bigint;
BEGIN
    LOOP
        SELECT task_id, held_until INTO v_holder, v_until
          FROM job_unique_keys WHERE job = p_job AND unique_key = p_unique_key FOR UPDATE;
        EXIT WHEN FOUND;
        INSERT INTO job_unique_keys (job, unique_key, task_id)
            VALUES (p_job, p_unique_key, p_id) ON CONFLICT DO NOTHING;
        EXIT WHEN FOUND;  -- made and locked, no holder; else a racing producer made it
    END LOOP;
    -- Made by an earlier send of this call whose reply was lost (the client makes ids at
    -- random, and refuses id= with a unique key): the same answer, nothing written again.
    IF v_holder = p_id OR EXISTS (SELECT 1 FROM tasks WHERE id = p_id) THEN
        RETURN p_id;
    END IF;
    v_now := clock_timestamp();
    IF v_holder IS NOT NULL AND p_debounce IS NULL AND v_until > v_now
       AND EXISTS (SELECT 1 FROM tasks
                    WHERE id = v_holder AND status NOT IN ('failed', 'cancelled')) THEN
        RETURN v_holder;
    END IF;
    IF v_holder IS NOT NULL AND p_debounce IS NOT NULL THEN
        -- Not started: ready and never claimed (a claim raises owner_epoch).
        -- Never claimed, so no model-limit hold to drop; finished_at set here (0040).
        UPDATE tasks SET status = 'cancelled', ready_at = NULL, claimable_at = NULL,
                         updated_at = v_now, finished_at = v_now, last_seq = last_seq + 1
         WHERE id = v_holder AND status = 'ready' AND owner_epoch = 0
        RETURNING last_seq INTO v_seq;
        IF FOUND THEN
            INSERT INTO events (task_id, seq, type, data)
                VALUES (v_holder, v_seq, 'TaskFinished',
                        json_build_object('v', 1, 'status', 'cancelled', 'answer', '',
                                          'error', 'superseded by ' || p_id)::text);
            PERFORM noeta_announce_finish(v_holder);
        END IF;
    END IF;
    IF NOT noeta_create_task(p_id, p_queue,
                             CASE WHEN p_debounce IS NULL THEN p_ready
                                  ELSE v_now + p_debounce END,
                             p_types, p_data, p_key, p_priority) THEN
        RAISE EXCEPTION USING ERRCODE = 'NT409', MESSAGE = p_id;
    END IF;
    UPDATE job_unique_keys SET task_id = p_id, held_until = v_now + p_unique_for
     WHERE job = p_job AND unique_key = p_unique_key;
    RETURN p_id;
END $function$;

CREATE OR REPLACE FUNCTION noeta_append_and_finish(p_task text, p_epoch bigint, p_expected_seq bigint, p_events jsonb, p_status text)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now timestamptz := noeta_fence(p_task, p_epoch, p_expected_seq);
    v_seq bigint := p_expected_seq + jsonb_array_length(p_events);
    v_pinned boolean := false;
    v_needs text[];
BEGIN
    IF p_status NOT IN ('done', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'noeta_append_and_finish: % is not a finished status', p_status;
    END IF;
    INSERT INTO events (task_id, seq, type, data, epoch, owner)
        SELECT p_task, p_expected_seq + e.ord, e.pair->>0, e.pair->>1, p_epoch,
               (SELECT owner FROM tasks WHERE id = p_task)
          FROM jsonb_array_elements(p_events) WITH ORDINALITY AS e(pair, ord);
    -- needs (0025): the plugin names of its latest pin, sorted, each once, written by the
    -- append's own update of the row below: no trigger, no second update of the row.
    IF p_events @? '$[*] ? (@[0] == "PluginsPinned")' THEN
        v_pinned := true;
        SELECT array_agg(DISTINCT pin ->> 0 ORDER BY pin ->> 0) INTO v_needs
          FROM json_array_elements((
              SELECT (e.pair ->> 1)::json -> 'pins'
                FROM jsonb_array_elements(p_events) WITH ORDINALITY AS e(pair, ord)
               WHERE e.pair ->> 0 = 'PluginsPinned' ORDER BY e.ord DESC LIMIT 1)) AS pin;
    END IF;
    -- finished_at and the hold are set here: no trigger sets them (0024, 0040).
    UPDATE tasks SET last_seq = v_seq, status = p_status, lease_until = NULL,
           ready_at = NULL, claimable_at = NULL, updated_at = v_now, finished_at = v_now,
           needs = CASE WHEN v_pinned THEN v_needs ELSE needs END
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
