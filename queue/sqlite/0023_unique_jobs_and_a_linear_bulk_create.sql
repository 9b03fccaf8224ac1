-- Unique and debounced jobs (issue 29 item 8, ADR-0093): which job holds a producer's
-- unique key. Only an enqueue that gives a key reads or writes it. (The PostgreSQL twin
-- also makes noeta_create_tasks linear in its batch; sqlite creates a batch in Python.)
CREATE TABLE job_unique_keys (
    job TEXT NOT NULL,         -- the function's name: one key space per job
    unique_key TEXT NOT NULL,  -- the producer's key (an order id, a user id...)
    task_id TEXT NOT NULL,     -- the job that holds the key (its task may be pruned since)
    -- unique_for: the end of the window (microseconds, as every time here); NULL for a
    -- debounced key, held by its job for as long as that has not started.
    held_until INTEGER,
    PRIMARY KEY (job, unique_key)
);
