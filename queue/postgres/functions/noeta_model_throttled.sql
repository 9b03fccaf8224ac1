CREATE OR REPLACE FUNCTION noeta_model_throttled(p_keys text[], p_seconds double precision)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM FROM model_limits AS m WHERE m.key = ANY (p_keys) ORDER BY m.key FOR UPDATE;
    UPDATE model_limits SET throttled = throttled + 1,
           paused_until = CASE WHEN p_seconds IS NULL THEN paused_until ELSE
               greatest(paused_until, clock_timestamp() + p_seconds * interval '1 second') END,
           updated_at = clock_timestamp()
     WHERE key = ANY (p_keys);
END $function$;
