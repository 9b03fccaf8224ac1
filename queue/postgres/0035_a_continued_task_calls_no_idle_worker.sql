-- A continued task calls no idle worker (issue 33, ADR-0117): the append that makes a
-- canvas claimable (its member's handback) or creates its next member names, in the
-- transaction-local setting noeta.continues, the task its own worker claims next; the
-- wake-up triggers skip that one task (not one in a queue with settings). Nothing else
-- changes: an ordinary append sets nothing, and the triggers call whom they called.
-- And noeta_start_created: the step's next member created claimed and started by the
-- appending worker, in the append's own statement (one claim a link fewer).
CREATE OR REPLACE FUNCTION noeta_notify_claimable()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    -- The task the appending worker claims next (noeta.continues, set by its append for
    -- this transaction: a canvas member's handback, ADR-0117) calls nobody: an idle worker
    -- called for it would only race that claim. Unless its queue has settings, which
    -- that claim leaves to the due walk.
    IF NEW.id = current_setting('noeta.continues', true) THEN
        IF NOT EXISTS (SELECT FROM queue_settings AS s WHERE s.queue = NEW.queue) THEN
            RETURN NULL;
        END IF;
    END IF;
    PERFORM noeta_wake_idle(NEW.queue, 1);
    RETURN NULL;
END $function$;
;

CREATE OR REPLACE FUNCTION noeta_notify_created()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    -- Not counted: the task its creator claims next (noeta.continues, as in
    -- noeta_notify_claimable: a canvas's next member, ADR-0117).
    PERFORM noeta_wake_idle(due.queue, due.tasks)
       FROM (SELECT queue, count(*)::integer AS tasks FROM created
              WHERE status IN ('ready', 'waiting')
                AND claimable_at <= clock_timestamp()
                AND (id IS DISTINCT FROM current_setting('noeta.continues', true)
                     OR EXISTS (SELECT FROM queue_settings AS s WHERE s.queue = created.queue))
              GROUP BY queue) AS due;
    RETURN NULL;
END $function$;
;

-- A canvas's next member created claimed and started by the appending worker (ADR-0117):
-- run by the append's statement after noeta_append.
CREATE OR REPLACE FUNCTION noeta_start_created(p_task text, p_worker text, p_lease double precision, p_types text[], p_data text[], p_needs text[])
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_until timestamptz := clock_timestamp() + make_interval(secs => p_lease);
    v_seq bigint;
BEGIN
    -- A task the same statement's append has just created (ADR-0117): claimed by the
    -- appending worker at epoch 1, as a claim would, and started under that claim (its
    -- events, as a claim that starts a job writes them). Not in a queue with settings:
    -- their limits are the due walk's to weigh, so the whole append is refused (NT423).
    UPDATE tasks AS t
       SET status = 'running', owner = p_worker, owner_epoch = 1, lease_until = v_until,
           claimable_at = v_until, updated_at = clock_timestamp(),
           last_seq = t.last_seq + cardinality(p_types), needs = coalesce(p_needs, t.needs)
     WHERE t.id = p_task AND t.status = 'ready' AND t.owner_epoch = 0
       AND NOT EXISTS (SELECT FROM queue_settings AS s WHERE s.queue = t.queue)
    RETURNING t.last_seq - cardinality(p_types) INTO v_seq;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'NT423',
            MESSAGE = format('task %s cannot be created started: its queue has settings', p_task);
    END IF;
    INSERT INTO events (task_id, seq, type, data, epoch, owner)
        SELECT p_task, v_seq + e.ord, e.type, e.data, 1, p_worker
          FROM unnest(p_types, p_data) WITH ORDINALITY AS e(type, data, ord);
    RETURN v_until;
END $function$;
;
