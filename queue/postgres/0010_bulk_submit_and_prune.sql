-- Bulk submit and retention (ADR-0065, ADR-0066).

-- Wake-ups for created tasks: one NOTIFY per queue per INSERT statement, not one per row.
-- A batch of 10,000 tasks in one queue sends one notification; a single create still
-- sends one. The payload keeps its meaning (a queue name), so workers listen as before.
-- Updates keep the row trigger: they touch one task each (a release, a delivery).
DROP TRIGGER tasks_notify_claimable ON tasks;

CREATE TRIGGER tasks_notify_claimable
    AFTER UPDATE OF claimable_at, status ON tasks
    FOR EACH ROW
    WHEN (NEW.status IN ('ready', 'waiting') AND NEW.claimable_at <= clock_timestamp())
    EXECUTE FUNCTION noeta_notify_claimable();

CREATE FUNCTION noeta_notify_created() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('noeta_wake', due.queue)
       FROM (SELECT DISTINCT queue FROM created
              WHERE status IN ('ready', 'waiting')
                AND claimable_at <= clock_timestamp()) AS due;
    RETURN NULL;
END $$;

-- A transition table needs a trigger of one event: the insert has its own.
CREATE TRIGGER tasks_notify_created
    AFTER INSERT ON tasks
    REFERENCING NEW TABLE AS created
    FOR EACH STATEMENT
    EXECUTE FUNCTION noeta_notify_created();

-- The ids of pruned tasks, unless the operator said they may be used again
-- (`noeta db prune --forget-ids`): a client that re-submits a task by its id after a
-- retry must never run it twice because the first run was pruned in between.
CREATE TABLE pruned_task_ids (
    id        text PRIMARY KEY,
    pruned_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- A pruned id is taken: creating a task with it creates nothing, as for an existing id
-- (every way a task is made inserts into tasks, so one trigger covers them all).
CREATE FUNCTION noeta_skip_pruned_id() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM pruned_task_ids WHERE id = NEW.id) THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER tasks_keep_pruned_ids_taken
    BEFORE INSERT ON tasks
    FOR EACH ROW
    EXECUTE FUNCTION noeta_skip_pruned_id();

-- Creates a batch of tasks with their first events, all or none: if any id is taken
-- (by a task, or a pruned one), raises NT409 naming the first such id and writes nothing.
-- p_event_task is each event's task, as an index (1-based) into p_ids.
CREATE FUNCTION noeta_create_tasks(
    p_ids text[], p_queues text[], p_ready timestamptz[], p_counts int[],
    p_event_task int[], p_event_seq int[], p_types text[], p_data text[])
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    v_created text[];
    v_taken text;
BEGIN
    WITH inserted AS (
        INSERT INTO tasks (id, queue, status, ready_at, claimable_at, last_seq)
            SELECT t.id, t.queue, 'ready', t.ready, coalesce(t.ready, clock_timestamp()),
                   t.count
              FROM unnest(p_ids, p_queues, p_ready, p_counts) AS t(id, queue, ready, count)
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
END $$;

-- When a task finished, for pruning. Not updated_at: every append sets it, and an index
-- on a column an update changes makes that update non-HOT (every index of tasks gets a
-- new entry, on every append). finished_at changes only when the status does, which the
-- finishing update changes anyway; a BEFORE trigger keeps it, its WHEN evaluated without
-- a function call for the appends that keep the status.
ALTER TABLE tasks ADD COLUMN finished_at timestamptz;
UPDATE tasks SET finished_at = updated_at WHERE status IN ('done', 'failed', 'cancelled');

CREATE FUNCTION noeta_mark_finished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.finished_at := CASE WHEN NEW.status IN ('done', 'failed', 'cancelled')
                            THEN coalesce(NEW.updated_at, clock_timestamp()) END;
    RETURN NEW;
END $$;

CREATE TRIGGER tasks_mark_finished BEFORE UPDATE OF status ON tasks
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION noeta_mark_finished();
CREATE TRIGGER tasks_mark_created_finished BEFORE INSERT ON tasks
    FOR EACH ROW WHEN (NEW.status IN ('done', 'failed', 'cancelled'))
    EXECUTE FUNCTION noeta_mark_finished();

CREATE INDEX tasks_finished ON tasks (finished_at) WHERE finished_at IS NOT NULL;

-- A subtask's id is <parent>.<call>.<n>: a parent with a live subtask is kept (the
-- subtask's finish delivers its report to the parent). Only live ids with a dot are here,
-- in byte order, so the prefix range of a parent's id is one index range.
CREATE INDEX tasks_live_subtasks ON tasks (id text_pattern_ops)
    WHERE status IN ('ready', 'running', 'holding', 'waiting') AND strpos(id, '.') > 0;

-- The cron history of a pruned task goes with it.
CREATE INDEX cron_fires_by_task ON cron_fires (task_id) WHERE task_id IS NOT NULL;

-- Whether a finished task may go, as far as its family goes: not while its parent is live
-- (the parent's finish may still deliver a cancel to it), nor while a subtask of it is
-- live (that subtask's finish delivers its report to it). The parent of <p>.<call>.<n>
-- is <p>; an id with dots that is not a subtask only costs a lookup.
CREATE FUNCTION noeta_may_prune(p_id text) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT NOT EXISTS (
               SELECT 1 FROM tasks parent
                WHERE parent.id = regexp_replace(p_id, '\.[^.]*\.[^.]*$', '')
                  AND parent.id <> p_id
                  AND parent.status IN ('ready', 'running', 'holding', 'waiting'))
       AND NOT EXISTS (
               SELECT 1 FROM tasks child
                WHERE child.id ~>=~ (p_id || '.') AND child.id ~<~ (p_id || '/')
                  AND child.status IN ('ready', 'running', 'holding', 'waiting')
                  AND strpos(child.id, '.') > 0)
$$;

-- Prunes up to p_limit tasks that finished before p_before (in p_queue, or any), oldest
-- first, with everything that names them: events, inbox, snapshots, late results, cron
-- history. One short transaction; rows another transaction holds are skipped, not waited
-- for. Kept: a subtask whose parent is live, a task with a live subtask. With
-- p_keep_ids, each pruned id stays taken (pruned_task_ids).
CREATE FUNCTION noeta_prune_finished(
    p_before timestamptz, p_queue text, p_limit int, p_keep_ids boolean,
    OUT tasks_pruned int, OUT events_pruned bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_ids text[];
BEGIN
    SELECT array_agg(picked.id) INTO v_ids FROM (
        SELECT t.id FROM tasks t
         WHERE t.finished_at < p_before
           AND (p_queue IS NULL OR t.queue = p_queue)
           AND noeta_may_prune(t.id)
         ORDER BY t.finished_at
         LIMIT p_limit
         FOR UPDATE OF t SKIP LOCKED) AS picked;
    tasks_pruned := coalesce(cardinality(v_ids), 0);
    events_pruned := 0;
    IF tasks_pruned = 0 THEN
        RETURN;
    END IF;
    DELETE FROM events WHERE task_id = ANY (v_ids);
    GET DIAGNOSTICS events_pruned = ROW_COUNT;
    DELETE FROM inbox WHERE task_id = ANY (v_ids);
    DELETE FROM snapshots WHERE task_id = ANY (v_ids);
    DELETE FROM late_results WHERE task_id = ANY (v_ids);
    DELETE FROM cron_fires WHERE task_id = ANY (v_ids);
    IF p_keep_ids THEN
        INSERT INTO pruned_task_ids (id) SELECT unnest(v_ids) ON CONFLICT (id) DO NOTHING;
    END IF;
    DELETE FROM tasks WHERE id = ANY (v_ids);
END $$;
