-- Queue limits and priorities, as in PostgreSQL's 0010 (ADR-0073). sqlite has one writer
-- at a time, so its claim (noeta/backends/stores/sqlite/claims.py) counts and takes in
-- its BEGIN IMMEDIATE transaction with no lock of its own.
CREATE TABLE queue_settings (
    queue               TEXT PRIMARY KEY NOT NULL,
    concurrency         INTEGER CHECK (concurrency > 0),
    per_key_concurrency INTEGER CHECK (per_key_concurrency > 0),
    rate_count          INTEGER CHECK (rate_count > 0),
    rate_seconds        REAL CHECK (rate_seconds > 0),
    rate_tokens         REAL,
    -- Microseconds since the Unix epoch, as every time here.
    rate_at             INTEGER,
    paused              INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    updated_at          INTEGER NOT NULL
                            DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)),
    CONSTRAINT a_rate_has_a_count_and_a_period CHECK (
        (rate_count IS NULL) = (rate_seconds IS NULL))
);

ALTER TABLE tasks ADD COLUMN concurrency_key TEXT;
ALTER TABLE tasks ADD COLUMN priority INTEGER NOT NULL DEFAULT 0
    CONSTRAINT priority_in_range CHECK (priority BETWEEN 0 AND 9);

DROP INDEX tasks_claimable_in_queue;
CREATE INDEX tasks_claimable_by_priority ON tasks (queue, priority DESC, claimable_at)
    WHERE claimable_at IS NOT NULL;
