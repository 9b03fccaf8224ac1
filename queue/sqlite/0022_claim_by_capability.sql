-- Jobs go only to workers that can run them (issue 29 item 1, ADR-0092): the sqlite twin
-- of PostgreSQL's 0022. needs and offers are JSON arrays of plugin names (sqlite has no
-- arrays); times are integer microseconds, as everywhere here.

-- The names of the plugins the task has pinned; NULL: any worker may run it.
ALTER TABLE tasks ADD COLUMN needs TEXT;

-- The live workers (PostgreSQL's twin says why).
CREATE TABLE workers (
    id         TEXT PRIMARY KEY NOT NULL,
    queues     TEXT NOT NULL,
    offers     TEXT,
    started_at INTEGER NOT NULL,
    last_seen  INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);

CREATE TRIGGER events_record_needs AFTER INSERT ON events FOR EACH ROW
    WHEN NEW.type = 'PluginsPinned'
BEGIN
    UPDATE tasks SET needs = (
        SELECT CASE WHEN count(*) = 0 THEN NULL ELSE json_group_array(name) END
          FROM (SELECT DISTINCT json_extract(pin.value, '$[0]') AS name
                  FROM json_each(NEW.data, '$.pins') AS pin ORDER BY 1))
     WHERE id = NEW.task_id;
END;
