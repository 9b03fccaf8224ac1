-- Pickup without a global lock (issue 28 item 4, ADR-0087).
--
-- A NOTIFY makes its transaction's commit take a database-wide lock, held through the
-- commit's WAL flush: sent on every create and every finish, it serialised every
-- committing transaction (the plateau at ~230 jobs/s). Now a create wakes only workers
-- that wait, one per task, each on its own channel; a finish is announced only to a
-- client that waits for it. Nobody waiting: no NOTIFY at all.

-- Workers with a free slot whose last claim found nothing, each listening on `channel`
-- (its own). A create, a task made claimable again, or the scheduler's timer takes one
-- row per task (noeta_wake_idle) and notifies that channel alone. `expires_at` (a lease
-- ahead, refreshed while the worker idles): a killed worker's row stops being picked.
CREATE TABLE idle_workers (
    channel    text PRIMARY KEY,
    queues     text[] NOT NULL,
    expires_at timestamptz NOT NULL
);

-- Tasks a client waits on (`result()`): their finish is announced (noeta_finished), and
-- the row deleted. The mark is written under the task row's lock (ADR-0087).
CREATE TABLE finish_waiters (
    task_id text PRIMARY KEY
);

CREATE OR REPLACE FUNCTION noeta_wake_idle(p_queue text, p_count integer)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_channel text;
    v_woken integer := 0;
BEGIN
    -- Shared: creators never wait on each other. A worker going idle takes it exclusively
    -- with its registration, so either this sees the registration, or this transaction
    -- has committed before the worker's next claim looks (ADR-0087).
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('noeta.wake:' || current_schema(), 0));
    -- The most recently refreshed first: a dead worker's row, never refreshed, comes last.
    FOR v_channel IN
        DELETE FROM idle_workers WHERE channel IN (
            SELECT channel FROM idle_workers
             WHERE queues @> ARRAY[p_queue] AND expires_at > clock_timestamp()
             ORDER BY expires_at DESC LIMIT p_count FOR UPDATE SKIP LOCKED)
        RETURNING channel
    LOOP
        PERFORM pg_notify(v_channel, p_queue);
        v_woken := v_woken + 1;
    END LOOP;
    RETURN v_woken;
END $function$;

CREATE OR REPLACE FUNCTION noeta_notify_created()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM noeta_wake_idle(due.queue, due.tasks)
       FROM (SELECT queue, count(*)::integer AS tasks FROM created
              WHERE status IN ('ready', 'waiting')
                AND claimable_at <= clock_timestamp()
              GROUP BY queue) AS due;
    RETURN NULL;
END $function$;

CREATE OR REPLACE FUNCTION noeta_notify_claimable()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM noeta_wake_idle(NEW.queue, 1);
    RETURN NULL;
END $function$;

CREATE OR REPLACE FUNCTION noeta_announce_finish(p_task text)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
    -- Called after the finishing UPDATE of the task's row, whose lock a waiter's mark
    -- also takes: a mark is either seen here or saw the task finished (ADR-0087).
    DELETE FROM finish_waiters WHERE task_id = p_task;
    IF FOUND THEN
        PERFORM pg_notify('noeta_finished', p_task);
    END IF;
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
    UPDATE tasks SET last_seq = v_seq, status = p_status, lease_until = NULL,
           ready_at = NULL, claimable_at = NULL, updated_at = v_now
     WHERE id = p_task;
    PERFORM noeta_announce_finish(p_task);
    RETURN v_seq;
END $function$;


CREATE OR REPLACE FUNCTION noeta_register_idle(p_channel text, p_queues text[], p_lease double precision)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now timestamptz;
BEGIN
    -- The exclusive side of noeta_wake_idle's lock: waits for every creator that looked
    -- for idle workers before this registration, and holds new ones off until it commits
    -- (then they see it).
    PERFORM pg_advisory_xact_lock(hashtextextended('noeta.wake:' || current_schema(), 0));
    v_now := clock_timestamp();
    DELETE FROM idle_workers WHERE expires_at <= v_now;  -- killed workers'
    INSERT INTO idle_workers (channel, queues, expires_at)
        VALUES (p_channel, p_queues, v_now + make_interval(secs => p_lease))
        ON CONFLICT (channel) DO UPDATE
        SET queues = excluded.queues, expires_at = excluded.expires_at;
    -- A statement after the lock, so a snapshot holding those creators' tasks: true if
    -- one of these queues has a task claimable now (claim before waiting). The claim's
    -- walk, per queue and priority down the claim index: a probe with clock_timestamp()
    -- (volatile) or a generic plan's parameter scanned the whole table (94 ms beside
    -- 200,000 future tasks, all of it holding creators off).
    RETURN EXISTS (
        SELECT 1 FROM unnest(p_queues) AS q(queue)
         CROSS JOIN LATERAL (SELECT t.priority FROM tasks AS t
                              WHERE t.queue = q.queue AND t.claimable_at IS NOT NULL
                              ORDER BY t.priority DESC LIMIT 1) AS top
         CROSS JOIN generate_series(top.priority, 0, -1) AS p(priority)
         CROSS JOIN LATERAL (SELECT 1 FROM tasks AS t
                              WHERE t.queue = q.queue AND t.priority = p.priority
                                AND t.claimable_at <= v_now
                              ORDER BY t.claimable_at LIMIT 1) AS found);
END $function$;
