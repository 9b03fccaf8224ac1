CREATE OR REPLACE FUNCTION noeta_take_model_budget(p_keys text[], p_tokens bigint, p_at timestamp with time zone, p_calls integer)
 RETURNS void
 LANGUAGE sql
AS $function$
    UPDATE model_limits SET
        requests_at = CASE WHEN rpm IS NULL THEN NULL ELSE
            greatest(requests_at, p_at) + interval '60 seconds' / rpm END,
        tokens_at = CASE WHEN tpm IS NULL THEN NULL ELSE
            greatest(tokens_at, p_at) + interval '60 seconds' * p_tokens / tpm END,
        calls = calls + p_calls, updated_at = clock_timestamp()
     WHERE key = ANY (p_keys);
$function$;
