-- Pruning a task no longer waits for its live retry (issue 31, ADR-0113): a retry is
-- named after its source (ADR-0098) but is no subtask of it; "retry all" then "discard
-- all" discards the sources. The function's file: functions/noeta_may_prune.sql.
CREATE OR REPLACE FUNCTION noeta_may_prune(p_id text)
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
    -- A live retry of the task (<id>.retry-N, ADR-0098) or a subtask of that retry
    -- (<id>.retry-N.<call>.<n>) is named after it but reports nothing to it: it does
    -- not keep the task (ADR-0113). A subtask whose call id reads retry-N
    -- (<id>.retry-N.<n>: digits next) is a subtask, and does.
    SELECT NOT EXISTS (
               SELECT 1 FROM tasks parent
                WHERE parent.id = ANY (noeta_possible_parent_ids(p_id))
                  AND parent.status IN ('ready', 'running', 'holding', 'waiting'))
       AND NOT EXISTS (
               SELECT 1 FROM tasks child
                WHERE child.id ~>=~ (p_id || '.') AND child.id ~<~ (p_id || '/')
                  AND child.status IN ('ready', 'running', 'holding', 'waiting')
                  AND strpos(child.id, '.') > 0
                  AND substr(child.id, length(p_id) + 2)
                      !~ '^retry-[1-9][0-9]*(\.(?![0-9]+(\.|$))|$)')
$function$;
