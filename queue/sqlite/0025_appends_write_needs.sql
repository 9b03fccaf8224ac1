-- The sqlite twin of PostgreSQL's 0025 (issue 28 item 1): the creates and the appends
-- write tasks.needs with the row they insert or update (noeta/backends/stores/sqlite/
-- appends.py: the latest pin's names, sorted, each once), so the trigger goes.
DROP TRIGGER events_record_needs;
