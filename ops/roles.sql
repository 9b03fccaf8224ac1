-- noeta's two database roles and its schema. Run ONCE per database, by an administrator
-- (a superuser, or on a managed service the admin user), with psql:
--
--   NOETA_OWNER_PASSWORD=… NOETA_WORKER_PASSWORD=… \
--     psql "$ADMIN_URL" -f ops/roles.sql [-v owner=noeta_owner -v worker=noeta_worker -v schema=noeta]
--
-- then, as the owner: `noeta db migrate`, then `psql "$OWNER_URL" -f ops/grants.sql`.
-- Passwords are read from the environment (psql's \getenv), never written here; an unset
-- variable leaves that role's password as it is (e.g. for peer or certificate login).
-- Safe to run again: it creates what is missing and (re)sets passwords and settings.
--
--   owner  (noeta_owner)   owns the schema and everything in it; runs `noeta db migrate`.
--                          Never used by a long-running process.
--   worker (noeta_worker)  used by `noeta worker`, `noeta scheduler` and people's commands
--                          (submit, send, tasks, show, tail, cancel). It can read and write
--                          rows as the store does, and nothing else: no DDL, no TRUNCATE,
--                          no DELETE, no UPDATE of the log. Its grants are in grants.sql.

\set ON_ERROR_STOP on
\if :{?owner}
\else
  \set owner noeta_owner
\endif
\if :{?worker}
\else
  \set worker noeta_worker
\endif
\if :{?schema}
\else
  \set schema noeta
\endif
\getenv owner_password NOETA_OWNER_PASSWORD
\getenv worker_password NOETA_WORKER_PASSWORD

BEGIN;

SELECT NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'owner') AS create_owner,
       NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'worker') AS create_worker,
       current_setting('is_superuser')::boolean AS superuser,
       current_database() AS database
\gset

\if :create_owner
  CREATE ROLE :"owner" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION;
\endif
\if :create_worker
  CREATE ROLE :"worker" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION;
\endif

-- A password in an ALTER ROLE statement would reach the server log if log_statement
-- logs DDL: turn statement logging off for this session (only a superuser may).
\if :superuser
  SET LOCAL log_statement = 'none';
\endif
\if :{?owner_password}
  ALTER ROLE :"owner" PASSWORD :'owner_password';
\endif
\if :{?worker_password}
  ALTER ROLE :"worker" PASSWORD :'worker_password';
\endif

-- A schema of noeta's own, owned by the owner: migrations create their tables here. The
-- worker gets USAGE only (grants.sql), never CREATE. (Not `public`: on PostgreSQL 14 and
-- older every role may create tables in public.)
CREATE SCHEMA IF NOT EXISTS :"schema" AUTHORIZATION :"owner";
GRANT CONNECT ON DATABASE :"database" TO :"owner", :"worker";
-- PostgreSQL lets every role create temporary tables; noeta never does. This assumes
-- noeta has a database of its own (recommended): in a database shared with other
-- applications that use temporary tables, drop this line.
REVOKE TEMPORARY ON DATABASE :"database" FROM PUBLIC;

-- Both roles find noeta's tables without a search_path in their URL. noeta migrates and
-- checks the schema its connection's search_path names first (current_schema()).
ALTER ROLE :"owner" SET search_path = :"schema";
ALTER ROLE :"worker" SET search_path = :"schema";

-- The worker's server-side backstops. noeta's own sessions set the same values per
-- connection (noeta/backends/stores/postgres/session.py), which take precedence over
-- these role settings (change noeta's with the URL's `options`); these cover psql and
-- any other client under this role. noeta itself never holds a transaction open across
-- a model or tool call and gives every statement a 10 s client deadline
-- (DEFAULT_DEADLINE_SECONDS in noeta/backends/stores/postgres/connection.py); these settings bound
-- what a client that is frozen, partitioned or misbehaving can hold, without ever cutting
-- a statement a healthy noeta process is still waiting for (noeta reports a server-side
-- cancel as an error, not as a lost claim, so the server must never be the first to act).
--
-- idle_in_transaction_session_timeout = one default lease (30 s). A client frozen inside
--   a transaction keeps its task row locked past its lease, and SKIP LOCKED claimers then
--   silently skip that task; the server ends such a session so the task can be taken over
--   (POSTGRES-FACTS.md, "Frozen workers"). noeta's own connections also set it per
--   connection (same value); this covers psql sessions and any other client under this
--   role. With `noeta worker --lease` above 30 s, raise it to the lease.
ALTER ROLE :"worker" SET idle_in_transaction_session_timeout = '30s';
-- statement_timeout = 3 x the client deadline. Every store statement is a single indexed
--   row operation that takes milliseconds; a statement still running at 30 s is one its
--   client gave up on at 10 s (the client shuts its socket; the server may not notice
--   until it next writes), and it must not keep row locks for minutes.
ALTER ROLE :"worker" SET statement_timeout = '30s';
-- lock_timeout = 1.5 x the client deadline: store statements lock at most a few task rows,
--   each held for one statement; a wait longer than the client deadline serves nobody.
--   It also stops a worker's statement queueing for long behind a migration's
--   ACCESS EXCLUSIVE lock. (Not set on the owner: `noeta db migrate` waits on an advisory
--   lock when two hosts migrate at once, and must be allowed to.)
ALTER ROLE :"worker" SET lock_timeout = '15s';
-- client_connection_check_interval: while a statement runs, the server checks every 5 s
--   whether its client is still there, and stops the statement if not: the server-side
--   half of the client's deadline (PostgreSQL 14+, Linux).
ALTER ROLE :"worker" SET client_connection_check_interval = '5s';
-- Deliberately NOT set: idle_session_timeout. A worker's LISTEN connection (wake-ups on
-- channel noeta_wake) is idle by design; ending it would only cost prompt wake-ups.

COMMIT;
