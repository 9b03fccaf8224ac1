CREATE OR REPLACE FUNCTION noeta_append_model_called_keeping_claim(p_task text, p_epoch bigint, p_expected_seq bigint, p_events jsonb, p_keys text[], p_tokens bigint, OUT seq bigint, OUT retry_at timestamp with time zone, OUT limit_key text, OUT limited boolean)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
DECLARE
    held record;
BEGIN
    -- The row as the claim holds it, locked first, as the fence inside locks it (the
    -- same order as every append: the task row, then the limit rows).
    SELECT status, lease_until, ready_at INTO held FROM tasks WHERE id = p_task FOR UPDATE;
    SELECT a.seq, a.retry_at, a.limit_key, a.limited INTO seq, retry_at, limit_key, limited
      FROM noeta_append_model_called(
          p_task, p_epoch, p_expected_seq, p_events, p_keys, p_tokens) AS a;
    IF seq IS NULL THEN  -- refused, and handed back: the claim is given its row again
        UPDATE tasks SET status = held.status, lease_until = held.lease_until,
               claimable_at = held.lease_until, ready_at = held.ready_at
         WHERE id = p_task;
    END IF;
END $function$;

CREATE OR REPLACE FUNCTION noeta_append_model_called_keeping_claim(p_task text, p_epoch bigint, p_expected_seq bigint, p_events jsonb, p_keys text[], p_tokens bigint, p_cost numeric, OUT seq bigint, OUT retry_at timestamp with time zone, OUT limit_key text, OUT limited boolean, OUT budgeted_at timestamp with time zone, OUT budget_refused jsonb)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
DECLARE
    held record;
BEGIN
    -- The row as the claim holds it, locked first, as the fence inside locks it (the
    -- same order as every append: the task row, then the limit rows).
    SELECT status, lease_until, ready_at INTO held FROM tasks WHERE id = p_task FOR UPDATE;
    SELECT a.seq, a.retry_at, a.limit_key, a.limited, a.budgeted_at, a.budget_refused
      INTO seq, retry_at, limit_key, limited, budgeted_at, budget_refused
      FROM noeta_append_model_called(
          p_task, p_epoch, p_expected_seq, p_events, p_keys, p_tokens, p_cost) AS a;
    IF seq IS NULL AND budget_refused IS NULL THEN  -- refused, and handed back: the claim is given its row again
        UPDATE tasks SET status = held.status, lease_until = held.lease_until,
               claimable_at = held.lease_until, ready_at = held.ready_at
         WHERE id = p_task;
    END IF;
END $function$;
