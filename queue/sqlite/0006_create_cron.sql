-- Cron (noeta scheduler): the same tables as PostgreSQL's 0006. Each (schedule, slot)
-- fires at most once: its cron_fires row is inserted in the same BEGIN IMMEDIATE
-- transaction as the task it creates or the message it delivers
-- (noeta/backends/stores/sqlite.py runs noeta_cron_fire's steps in Python).
-- Times are INTEGER microseconds since the Unix epoch, UTC (see 0001).

CREATE TABLE cron_schedules (
    name       TEXT PRIMARY KEY NOT NULL,
    -- The latest slot handled; a schedule seen for the first time starts at that moment.
    mark       INTEGER NOT NULL,
    -- The task its latest fire created: with overlap 'skip', no fire while it runs.
    last_task  TEXT,
    created_at INTEGER NOT NULL
                   DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER))
);

CREATE TABLE cron_fires (
    schedule  TEXT NOT NULL,
    slot      INTEGER NOT NULL,
    outcome   TEXT NOT NULL CHECK (outcome IN
                  ('created', 'delivered', 'skipped_overlap', 'missed', 'no_target')),
    task_id   TEXT,
    detail    TEXT NOT NULL DEFAULT '',
    fired_at  INTEGER NOT NULL,
    PRIMARY KEY (schedule, slot)
);
