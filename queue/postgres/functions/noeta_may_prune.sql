CREATE OR REPLACE FUNCTION noeta_may_prune(p_id text)
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
    SELECT NOT EXISTS (
               SELECT 1 FROM tasks parent
                WHERE parent.id = ANY (noeta_possible_parent_ids(p_id))
                  AND parent.status IN ('ready', 'running', 'holding', 'waiting'))
       AND NOT EXISTS (
               SELECT 1 FROM tasks child
                WHERE child.id ~>=~ (p_id || '.') AND child.id ~<~ (p_id || '/')
                  AND child.status IN ('ready', 'running', 'holding', 'waiting')
                  AND strpos(child.id, '.') > 0)
$function$;
