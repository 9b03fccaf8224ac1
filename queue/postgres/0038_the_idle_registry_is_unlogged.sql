-- The idle registry is unlogged (issue 28 item 4, ADR-0133). A worker's registration
-- (noeta_register_idle) holds the wake-up lock exclusively until it commits, and a
-- logged table's commit waits for its WAL flush: every create that called a worker
-- meanwhile waited behind it (`Lock:advisory`). A transaction that wrote only unlogged
-- tables commits without waiting for a flush, so the lock is held for the statement
-- alone; a call's delete writes no WAL either. idle_workers is a soft registry: a crash
-- (or a failover) empties it, and every worker, whose LISTEN connection the restart
-- ended, hears "*" when it listens again, claims, and registers anew
-- (tests/worker/test_idle_restart.py). Tasks, events and claims stay logged.
ALTER TABLE idle_workers SET UNLOGGED;
