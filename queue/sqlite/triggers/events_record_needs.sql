CREATE TRIGGER events_record_needs AFTER INSERT ON events FOR EACH ROW
    WHEN NEW.type = 'PluginsPinned'
BEGIN
    UPDATE tasks SET needs = (
        SELECT CASE WHEN count(*) = 0 THEN NULL ELSE json_group_array(name) END
          FROM (SELECT DISTINCT json_extract(pin.value, '$[0]') AS name
                  FROM json_each(NEW.data, '$.pins') AS pin ORDER BY 1))
     WHERE id = NEW.task_id;
END;
