-- tasks_by_status (status, queue) held every task row, so each non-HOT update of a task
-- (its claim and its finish; status is in the predicates of the partial indexes, so no
-- status change is HOT) added an entry to it: 3 of a one-shot task's 14 index entries.
-- Its readers need only the rows that are neither claimed nor done (issue 28 item 1,
-- measured on 1M tasks by bench/status_readers.py, docs/scaling.md):
--   * running and holding rows (live claims: queue limits, the web view, noeta list) are
--     exactly tasks_by_owner's rows, a few hundred at most: read through it;
--   * done rows are most of a table that keeps its history: a capped count or a page of
--     them is a short walk of the table or of tasks_by_creation, never an index range;
--   * ready, waiting, failed and cancelled rows are found through this index, so a
--     status that is rare (cancelled) or small (waiting) is never a walk of the table.
-- A task that is claimed and finishes done now adds one entry here (its create), not 3.
DROP INDEX tasks_by_status;
CREATE INDEX tasks_by_status_not_claimed_or_done ON tasks (status, queue)
    WHERE status IN ('ready', 'waiting', 'failed', 'cancelled');
