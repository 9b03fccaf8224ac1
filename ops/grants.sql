-- What the worker role may do in noeta's schema. Run AS THE OWNER after roles.sql and
-- after EVERY `noeta db migrate` (it is idempotent):
--
--   psql "$OWNER_URL" -f ops/grants.sql [-v worker=noeta_worker -v schema=noeta]
--
-- Two layers, and why:
--
-- 1. Default privileges (ALTER DEFAULT PRIVILEGES FOR ROLE <owner>): every table a later
--    migration creates is readable and writable by the worker (SELECT, INSERT, UPDATE;
--    USAGE on its sequences; EXECUTE on its functions) the moment the migration commits.
--    In a rolling upgrade the new workers start right after `noeta db migrate`; without
--    this, a forgotten grants.sql would leave them with "permission denied" on a new
--    table (e.g. the scheduler's cron_schedules and cron_fires). Never DELETE, TRUNCATE,
--    REFERENCES or TRIGGER, never DDL: those are not in the defaults.
--
-- 2. Explicit grants per table (the `declared` list below), which replace the defaults
--    wherever less is right: the log (events) and the applied-migrations table are never
--    updated by a worker, and an inbox entry only ever gets its taken_seq set. Defaults
--    cannot say that (they are per schema, not per table), so this file narrows them after
--    each migration. A table with no line here keeps the defaults and this file says so
--    (WARNING); tests/ops/test_roles.py fails for any table without a decision, so a new
--    migration cannot slip through unreviewed.
--
-- Explicit grants alone would be exact but fail closed on every upgrade until someone
-- re-runs this file; defaults alone would be automatic but let a worker rewrite the log.

\set ON_ERROR_STOP on
\if :{?worker}
\else
  \set worker noeta_worker
\endif
\if :{?schema}
\else
  \set schema noeta
\endif

BEGIN;
SET LOCAL noeta.grant_worker = :'worker';
SET LOCAL noeta.grant_schema = :'schema';

GRANT USAGE ON SCHEMA :"schema" TO :"worker";

-- Layer 1: what the owner creates from now on.
ALTER DEFAULT PRIVILEGES IN SCHEMA :"schema" GRANT SELECT, INSERT, UPDATE ON TABLES TO :"worker";
ALTER DEFAULT PRIVILEGES IN SCHEMA :"schema" GRANT USAGE ON SEQUENCES TO :"worker";
ALTER DEFAULT PRIVILEGES IN SCHEMA :"schema" GRANT EXECUTE ON FUNCTIONS TO :"worker";
-- PostgreSQL lets every role execute a new function; that default is global, so it can
-- only be revoked globally (for the owner's functions, which are all noeta's).
ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;

-- Layer 1 for what exists already: sequences and functions need nothing finer.
-- (The store's functions run as the caller, SECURITY INVOKER: EXECUTE gives nothing
-- beyond the table grants below. noeta_notify_claimable is a trigger function: a trigger
-- needs no EXECUTE from the role whose statement fires it.)
GRANT USAGE ON ALL SEQUENCES IN SCHEMA :"schema" TO :"worker";
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA :"schema" FROM PUBLIC;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA :"schema" TO :"worker";
-- Except the helpers the fenced functions used to call: they write without the fence
-- (an append to any task, with any epoch), so no one but the owner calls them (0014).
DO $helpers$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc AS p
              WHERE p.pronamespace = current_setting('noeta.grant_schema')::regnamespace
                AND p.proname IN ('noeta_insert_events', 'noeta_take_model_budget')
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC, %I',
                       f, current_setting('noeta.grant_worker'));
    END LOOP;
END
$helpers$;

-- Layer 2: exactly what the code does to each table (noeta/backends/stores/postgres/,
-- queue/postgres/functions/), and nothing where it does nothing.
DO $grants$
DECLARE
    v_worker text := current_setting('noeta.grant_worker');
    v_schema text := current_setting('noeta.grant_schema');
    t record;
BEGIN
    FOR t IN
        WITH declared (name, privileges) AS (VALUES
            -- create_task inserts; claim, renew, release and every append update the row.
            ('tasks',            'SELECT, INSERT, UPDATE'),
            -- The log is append-only: read and inserted, never updated or deleted.
            ('events',           'SELECT, INSERT'),
            -- deliver inserts (ON CONFLICT DO NOTHING); an append marks entries taken and
            -- changes nothing else (a payload is never rewritten).
            ('inbox',            'SELECT, INSERT, UPDATE (taken_seq)'),
            -- put_snapshot upserts (INSERT … ON CONFLICT DO UPDATE).
            ('snapshots',        'SELECT, INSERT, UPDATE'),
            -- keep_late_result inserts (ON CONFLICT DO NOTHING): a kept result is never
            -- rewritten, so the first one stays (ADR-040).
            ('late_results',     'SELECT, INSERT'),
            -- The claim locks a limited queue's row (FOR UPDATE needs UPDATE) and takes
            -- its rate tokens; `noeta queue set` upserts and `--clear` deletes, run with
            -- this role's URL as every other command (revoke INSERT and DELETE to leave
            -- limits to the owner: the claim needs SELECT and UPDATE only). ADR-0073.
            ('queue_settings',   'SELECT, INSERT, UPDATE, DELETE'),
            -- Every store open checks the applied migrations; only the owner writes them.
            ('noeta_migrations', 'SELECT'),
            -- The scheduler's tables (a coming migration): it reads, inserts and updates.
            ('cron_schedules',   'SELECT, INSERT, UPDATE'),
            ('cron_fires',       'SELECT, INSERT, UPDATE'),
            -- Creating a task reads it (a pruned id stays taken); only the owner prunes
            -- (`noeta db prune`, `noeta scheduler --retain`): the worker never deletes a task's rows.
            ('pruned_task_ids',  'SELECT'),
            -- Shared model limits (ADR-0075): the ModelCalled append and a 429 update a
            -- limit's budget and counters; `noeta limit set/clear` (with the workers' URL
            -- too) inserts and deletes limits: settings, not the log.
            ('model_limits',      'SELECT, INSERT, UPDATE, DELETE'),
            -- A held slot is inserted by the refusing append, deleted by the next attempt.
            ('model_limit_holds', 'SELECT, INSERT, DELETE'),
            -- Fleet budgets (ADR-0110): the ModelCalled append locks (FOR UPDATE needs
            -- UPDATE) and charges them; `noeta budget set/clear` (with the workers' URL
            -- too) inserts and deletes them: settings, not the log.
            ('fleet_budgets',     'SELECT, INSERT, UPDATE, DELETE'),
            -- An idle worker registers (upsert) and leaves; a create, a task made
            -- claimable or the scheduler takes a row to wake that worker (ADR-0087).
            ('idle_workers',      'SELECT, INSERT, UPDATE, DELETE'),
            -- `result()` marks a task awaited; the finishing append deletes the mark.
            ('finish_waiters',    'SELECT, INSERT, DELETE'),
            -- A worker records who it is, what it serves and offers (upsert, each
            -- round), marks its row stopped when it stops, and its round deletes the
            -- rows that left an hour ago; `noeta tasks` and `noeta workers` read them
            -- (ADR-0092, ADR-0100).
            ('workers',           'SELECT, INSERT, UPDATE, DELETE'),
            -- A unique or debounced enqueue locks its key's row (FOR UPDATE needs
            -- UPDATE), makes it, and points it at the new job (ADR-0093); never deleted.
            ('job_unique_keys',   'SELECT, INSERT, UPDATE'),
            -- The text search's table and its two marks (ADR-0102): a search (`noeta web`,
            -- `noeta tasks --search`, run with this role's URL) upserts rows and moves the
            -- marks; only the owner's prune deletes rows.
            ('task_search',       'SELECT, INSERT, UPDATE'),
            ('task_search_marks', 'SELECT, UPDATE'),
            -- Streamed replies (ADR-0105, unlogged): a worker inserts chunks and deletes
            -- a stream's rows once its reply is in the log; a reader (`noeta tail
            -- --follow`, with this role's URL) upserts its follow and reads.
            ('stream_chunks',     'SELECT, INSERT, DELETE'),
            ('stream_followers',  'SELECT, INSERT, UPDATE, DELETE'))
        SELECT c.relname AS name, d.privileges
          FROM pg_class AS c
          LEFT JOIN declared AS d ON d.name = c.relname
         WHERE c.relnamespace = v_schema::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm')
         ORDER BY c.relname
    LOOP
        IF t.privileges IS NULL THEN
            RAISE WARNING 'noeta grants: table %.% has no declared grants; the worker keeps '
                          'the defaults (SELECT, INSERT, UPDATE). Declare it in ops/grants.sql.',
                          v_schema, t.name;
            CONTINUE;
        END IF;
        EXECUTE format('REVOKE ALL ON TABLE %I.%I FROM %I', v_schema, t.name, v_worker);
        EXECUTE format('GRANT %s ON TABLE %I.%I TO %I', t.privileges, v_schema, t.name, v_worker);
    END LOOP;
END
$grants$;

COMMIT;
