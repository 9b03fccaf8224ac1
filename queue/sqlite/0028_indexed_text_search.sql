-- Text search over tasks (issue 31 item 3, ADR-0102). PostgreSQL keeps a table of what a
-- search matches, filled in batches past two marks, with a trigram index. A sqlite store
-- is one machine's and small: its search is a LIKE over the tasks and their events as
-- they are (the id, the prompt, a job's function name, a failed task's error), so it
-- adds nothing here; the number is kept so both dialects carry the same migrations.
SELECT 1;
