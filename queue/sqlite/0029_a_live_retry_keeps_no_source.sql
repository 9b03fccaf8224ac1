-- Pruning a task no longer waits for its live retry (issue 31, ADR-0113). sqlite has no
-- functions: the rule is in its prune's statements (retention.py, task_pruning.py),
-- through noeta_in_retry_line; the number is kept so both dialects carry the same
-- migrations.
SELECT 1;
