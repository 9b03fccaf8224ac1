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
