CREATE OR REPLACE FUNCTION noeta_possible_parent_ids(p_id text)
 RETURNS text[]
 LANGUAGE sql
 IMMUTABLE
AS $function$
    SELECT CASE WHEN cardinality(parts) < 3 OR parts[cardinality(parts)] !~ '^[0-9]+$'
                THEN '{}'::text[]
                ELSE ARRAY(SELECT array_to_string(parts[1:cut], '.')
                             FROM generate_series(1, cardinality(parts) - 2) AS cut) END
      FROM string_to_array(p_id, '.') AS parts
$function$;
