-- Tool results that came back after their claim was gone (ADR-040): a worker paused past
-- its lease finished a call, and its ToolFinished was refused. Kept outside the fenced log,
-- as a hint: the next claimer records one through its own fenced append if the call is
-- still half done in the log; otherwise it stays here for the operator (`noeta show`).
-- Written without a claim, so it can never change the log or the task row; the worker
-- role may only insert and read it (ops/grants.sql): a kept result is never rewritten.
CREATE TABLE late_results (
    task_id    text NOT NULL REFERENCES tasks (id),
    -- (task_id, call_id) is the call's idempotency key: one tool invocation. The first
    -- result kept wins (ON CONFLICT DO NOTHING): a hint a claimer may have read already
    -- must not change under it.
    call_id    text NOT NULL,
    -- The result text as ASCII JSON (noeta/core/payload.py): tool output may hold NULs.
    content    text NOT NULL,
    is_error   boolean NOT NULL,
    -- The epoch and worker of the claim the call ran under, for the log and the operator.
    epoch      bigint NOT NULL,
    worker     text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (task_id, call_id)
);
