-- The task logs: one row per event, append-only. Everything a task did is here; recovery
-- is folding it (see noeta/core/fold.py).
CREATE TABLE events (
    task_id    text NOT NULL REFERENCES tasks (id),
    -- 1, 2, 3, ... per task, without gaps: an append checks the last one (expected_seq).
    seq        bigint NOT NULL,
    -- The event's type name; its version and fields are in data.
    type       text NOT NULL,
    -- ASCII-only JSON (noeta/core/payload.py), so NUL bytes and lone surrogates from tool
    -- output round-trip exactly; jsonb would reject them. Never indexed.
    data       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (task_id, seq)
);
