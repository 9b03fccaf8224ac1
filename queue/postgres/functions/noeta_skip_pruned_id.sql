CREATE OR REPLACE FUNCTION noeta_skip_pruned_id()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF EXISTS (SELECT 1 FROM pruned_task_ids WHERE id = NEW.id) THEN
        RETURN NULL;
    END IF;
    PERFORM FROM tasks WHERE id = NEW.id FOR KEY SHARE;
    IF NOT FOUND AND EXISTS (SELECT 1 FROM pruned_task_ids WHERE id = NEW.id) THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END $function$;
