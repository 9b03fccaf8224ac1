-- Workers are first-class (issue 31 item 1, ADR-0100): the registry of live workers
-- (ADR-0092) says who each worker is, what it has done, and whether it is alive.
--
-- Each column has a default so that a worker of the previous version, still running in
-- a rolling upgrade, records its row as before (it writes none of them).
ALTER TABLE workers
    -- Where it runs: the host's name and the process id, as the worker reads them.
    ADD COLUMN host text NOT NULL DEFAULT '',
    ADD COLUMN pid integer NOT NULL DEFAULT 0,
    -- The noeta it runs and how many tasks it runs at once.
    ADD COLUMN version text NOT NULL DEFAULT '',
    ADD COLUMN concurrency integer NOT NULL DEFAULT 0,
    -- This run of the worker, drawn at its start: while its row is live, another run
    -- asking for the same name is refused (two runs under one name would adopt each
    -- other's claims); a row gone dead or stopped is taken by the next run.
    ADD COLUMN instance text NOT NULL DEFAULT '',
    -- Its counts since it started, written by its periodic round from memory (never a
    -- statement per task): the tasks it brought to an end, and of them the failed.
    ADD COLUMN processed bigint NOT NULL DEFAULT 0,
    ADD COLUMN failed bigint NOT NULL DEFAULT 0,
    -- Set when it stops: the row stays, listed as stopped, until the rounds of the
    -- others delete it with the dead ones (an hour after expires_at).
    ADD COLUMN stopped_at timestamptz;
