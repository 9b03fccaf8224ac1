-- The failures page groups every failure, and a search filtered to failed or cancelled
-- tasks walks only those (issue 31, ADR-0112): a failed or cancelled task's row of
-- task_search (0028) also holds how it ended, its error's kind and its kind (agent or
-- the job's function), read by the same walks that fill the row, off every task's path.
-- NULL in every other row: a finished status is final, so a row the walk by finish wrote
-- stays right; a row of a task not finished yet is written again when it fails.
ALTER TABLE task_search
    ADD COLUMN ended      text,  -- 'failed' or 'cancelled' as the walk read it; else NULL
    ADD COLUMN error_kind text,  -- as store_views.error_kind reads the error; '' if none
    ADD COLUMN kind       text;  -- 'agent', or the job's function name

-- The failed and cancelled rows newest first: what a search filtered to those statuses
-- walks, stopping at its page (a text many failures hold). With the kinds included, the
-- failures page groups every failure from this index alone (an index-only scan once
-- vacuum has marked the pages: 11,202 failures in 33-48 ms at a million tasks, where
-- the table's rows sit one a page).
CREATE INDEX task_search_ended ON task_search (ended, created_at, task_id)
    INCLUDE (error_kind, kind) WHERE ended IS NOT NULL;

-- Rows written before this migration have no ended: both walks start again and write
-- every row anew (the same texts, with the new columns). Until they are done, a search
-- reads what they have not reached yet directly, as it does before a first build.
UPDATE task_search_marks SET at = '-infinity', id = '';
