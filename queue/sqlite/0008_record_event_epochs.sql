-- Every event records the claim that appended it, as in PostgreSQL's 0008: the epoch the
-- append was fenced at and the owner the task row named, written by the fenced append
-- (noeta/backends/stores/sqlite/appends.py) inside its BEGIN IMMEDIATE transaction.
-- Events a task was created with were appended under no claim: epoch 0, owner NULL.
ALTER TABLE events ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;
ALTER TABLE events ADD COLUMN owner TEXT;
