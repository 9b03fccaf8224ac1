-- Tool results that came back after their claim was gone (ADR-040): a worker paused past
-- its lease finished a call, and its ToolFinished was refused. Kept outside the fenced log,
-- as a hint: the next claimer records one through its own fenced append if the call is
-- still half done in the log; otherwise it stays here for the operator (`noeta show`).
-- Written without a claim, so it can never change the log or the task row.
CREATE TABLE late_results (
    task_id    TEXT NOT NULL REFERENCES tasks (id),
    -- (task_id, call_id) is the call's idempotency key: one tool invocation. The first
    -- result kept wins (ON CONFLICT DO NOTHING): a hint a claimer may have read already
    -- must not change under it.
    call_id    TEXT NOT NULL,
    -- The result text as ASCII JSON (noeta/core/payload.py): tool output may hold NULs.
    content    TEXT NOT NULL,
    is_error   INTEGER NOT NULL CHECK (is_error IN (0, 1)),
    -- The epoch and worker of the claim the call ran under, for the log and the operator.
    epoch      INTEGER NOT NULL,
    worker     TEXT NOT NULL,
    -- Microseconds since the Unix epoch (see 0001).
    created_at INTEGER NOT NULL
                   DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER)),
    PRIMARY KEY (task_id, call_id)
);
