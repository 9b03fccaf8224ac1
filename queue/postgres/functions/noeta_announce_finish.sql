CREATE OR REPLACE FUNCTION noeta_announce_finish(p_task text)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
    -- Called after the finishing UPDATE of the task's row, whose lock a waiter's mark
    -- also takes: a mark is either seen here or saw the task finished (ADR-0087).
    DELETE FROM finish_waiters WHERE task_id = p_task;
    IF FOUND THEN
        PERFORM pg_notify('noeta_finished', p_task);
    END IF;
END $function$;
