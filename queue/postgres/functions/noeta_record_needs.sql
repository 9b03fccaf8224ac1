CREATE OR REPLACE FUNCTION noeta_record_needs()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_needs text[];
BEGIN
    -- The pins' names, sorted, without repeats; no pins: any worker.
    SELECT array_agg(DISTINCT pin ->> 0 ORDER BY pin ->> 0) INTO v_needs
      FROM json_array_elements(NEW.data::json -> 'pins') AS pin;
    -- A pin again with the same names (a new version) writes no row version.
    UPDATE tasks SET needs = v_needs
     WHERE id = NEW.task_id AND needs IS DISTINCT FROM v_needs;
    RETURN NULL;
END $function$;
