CREATE OR REPLACE FUNCTION noeta_model_tokens_used(p_keys text[], p_delta bigint)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
    PERFORM FROM model_limits AS m WHERE m.key = ANY (p_keys) ORDER BY m.key FOR UPDATE;
    UPDATE model_limits SET tokens_at = tokens_at + interval '60 seconds' * p_delta / tpm,
           updated_at = clock_timestamp()
     WHERE key = ANY (p_keys) AND tpm IS NOT NULL AND tokens_at IS NOT NULL;
END $function$;
