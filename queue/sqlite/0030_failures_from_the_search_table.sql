-- The failures page's and the filtered search's columns of task_search (issue 31,
-- ADR-0112). A sqlite store has no task_search (0028): it groups its failures and
-- searches its tasks as written; the number is kept so both dialects carry the same
-- migrations.
SELECT 1;
