-- The task logs: one row per event, append-only. Everything a task did is here; recovery
-- is folding it (see noeta/core/fold.py).
CREATE TABLE events (
    task_id    TEXT NOT NULL REFERENCES tasks (id),
    -- 1, 2, 3, ... per task, without gaps: an append checks the last one (expected_seq).
    seq        INTEGER NOT NULL,
    -- The event's type name; its version and fields are in data.
    type       TEXT NOT NULL,
    -- ASCII-only JSON (noeta/core/payload.py), so NUL bytes and lone surrogates from tool
    -- output round-trip exactly, as in the PostgreSQL schema. Never indexed.
    data       TEXT NOT NULL,
    -- Microseconds since the Unix epoch (see 0001).
    created_at INTEGER NOT NULL
                   DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)),
    PRIMARY KEY (task_id, seq)
);
