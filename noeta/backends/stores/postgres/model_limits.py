"""Shared model-call limits on PostgreSQL: the statements call the functions in
`queue/postgres/functions/` (`noeta_append_model_called`…), which hold the budget's
rules (ADR-0075)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from noeta.backends.stores.postgres.appends import events_json
from noeta.backends.stores.postgres.connection import PostgresConnection
from noeta.backends.stores.postgres.group_commit import LeanAppend
from noeta.core.ports.fleet_budgets import FleetBudget, FleetBudgetExceeded
from noeta.core.ports.model_limits import (
    ModelBudget,
    ModelBudgetHeld,
    ModelBudgetWait,
    ModelLimit,
    check_limit,
    check_limit_key,
)
from noeta.core.ports.store import Claim, NewEvent, check_append

APPEND_MODEL_CALLED = """
SELECT seq, retry_at, limit_key, limited, budgeted_at, budget_refused
  FROM noeta_append_model_called(%(task)s, %(epoch)s, %(expected_seq)s, %(events)s::jsonb,
                                 %(keys)s::text[], %(tokens)s, %(cost)s::numeric)
"""
# The same append for a task whose jobs need its claim: a refusal keeps it (0015).
APPEND_MODEL_CALLED_KEEPING_CLAIM = """
SELECT seq, retry_at, limit_key, limited, budgeted_at, budget_refused
  FROM noeta_append_model_called_keeping_claim(
      %(task)s, %(epoch)s, %(expected_seq)s, %(events)s::jsonb, %(keys)s::text[], %(tokens)s,
      %(cost)s::numeric)
"""
# The reply's real cost less the estimate, added to the budgets the call was charged to,
# in the period it was charged in; locked in key order first, as the append locks them.
FLEET_BUDGET_USED = """
WITH charged AS (
    SELECT f.queue, f.concurrency_key, f.period
      FROM fleet_budgets AS f JOIN tasks AS t ON t.id = %(task)s
     WHERE f.queue = t.queue AND f.concurrency_key IN ('', coalesce(t.concurrency_key, ''))
       AND f.period_start = date_trunc(f.period, %(at)s, 'UTC')
     ORDER BY f.queue, f.concurrency_key, f.period FOR UPDATE OF f)
UPDATE fleet_budgets AS f SET spent = greatest(0, f.spent + %(delta)s::numeric)
  FROM charged AS c
 WHERE (f.queue, f.concurrency_key, f.period) = (c.queue, c.concurrency_key, c.period)
"""
# Its spend and counts stay when it is changed: a budget raised mid-day keeps the day's
# spend. `known`: a task or the queue's settings name the queue.
SET_FLEET_BUDGET = """
WITH upserted AS (
    INSERT INTO fleet_budgets (queue, concurrency_key, period, amount)
    VALUES (%(queue)s, %(key)s, %(period)s, %(amount)s)
    ON CONFLICT (queue, concurrency_key, period) DO UPDATE SET amount = excluded.amount,
           updated_at = clock_timestamp())
SELECT EXISTS (SELECT 1 FROM queue_settings WHERE queue = %(queue)s)
    OR EXISTS (SELECT 1 FROM tasks WHERE queue = %(queue)s AND status = ANY (
                   '{ready,running,holding,waiting,done,failed,cancelled}'::text[]))
"""
CLEAR_FLEET_BUDGET = """
WITH cleared AS (
    DELETE FROM fleet_budgets WHERE queue = %(queue)s AND concurrency_key = %(key)s
    RETURNING 1)
SELECT count(*) FROM cleared
"""
LIST_FLEET_BUDGETS = """
SELECT queue, concurrency_key, period, amount, spent,
       CASE WHEN period_start > '-infinity' THEN period_start END, calls, refusals
  FROM fleet_budgets ORDER BY queue, concurrency_key, period
"""
MODEL_TOKENS_USED = "SELECT noeta_model_tokens_used(%(keys)s::text[], %(delta)s)"
MODEL_THROTTLED = "SELECT noeta_model_throttled(%(keys)s::text[], %(seconds)s)"
# Setting a limit starts its budget afresh only where the kind of limit is new.
SET_MODEL_LIMIT = """
INSERT INTO model_limits (key, rpm, tpm) VALUES (%(key)s, %(rpm)s, %(tpm)s)
ON CONFLICT (key) DO UPDATE SET rpm = excluded.rpm, tpm = excluded.tpm,
       updated_at = clock_timestamp()
"""
# The slots it held for tasks go with it: a call no limit applies to takes no hold.
CLEAR_MODEL_LIMIT = """
WITH released AS (DELETE FROM model_limit_holds WHERE limit_key = %(key)s)
DELETE FROM model_limits WHERE key = %(key)s RETURNING key
"""
LIST_MODEL_LIMITS = """
SELECT key, rpm, tpm, CASE WHEN paused_until > clock_timestamp() THEN paused_until END,
       calls, handbacks, waited_seconds, throttled
  FROM model_limits ORDER BY key
"""


class PostgresModelLimits(PostgresConnection):
    """The `ModelLimiter` on PostgreSQL: one row per limit, locked by the appends it counts."""

    async def append_model_called(
        self, claim: Claim, expected_seq: int, events: Sequence[NewEvent], budget: ModelBudget
    ) -> int:
        check_append(events, ())
        encoded = events_json(events)
        # Where no limit applies, the ModelCalled append is a plain continue: it shares the
        # group commit; where one does, the batch leaves it out and it goes alone.
        lean = LeanAppend(
            claim.task_id, claim.epoch, expected_seq, encoded, model_keys=json.dumps(budget.keys)
        )
        budget.taken.by_a_limit, budget.taken.by_a_budget_at = False, None
        return await self._group_commit.append(
            lean, lambda: self._append_model_called_alone(claim, expected_seq, encoded, budget)
        )

    async def _append_model_called_alone(
        self, claim: Claim, expected_seq: int, events: str, budget: ModelBudget
    ) -> int:
        params = {
            "task": claim.task_id,
            "epoch": claim.epoch,
            "expected_seq": expected_seq,
            "events": events,
            "keys": list(budget.keys),
            "tokens": budget.tokens,
            "cost": budget.cost,
        }
        statement = APPEND_MODEL_CALLED_KEEPING_CLAIM if budget.keep_claim else APPEND_MODEL_CALLED
        row = await self._write(statement, params, task_id=claim.task_id)
        assert row is not None
        seq, retry_at, limit_key, limited, budget.taken.by_a_budget_at, refused = row
        budget.taken.by_a_limit = bool(limited)
        if refused is not None:
            raise _exceeded(claim.task_id, refused)
        if seq is None and budget.keep_claim:
            raise ModelBudgetHeld(claim.task_id, limit_key, retry_at)
        if seq is None:
            raise ModelBudgetWait(claim.task_id, limit_key, retry_at)
        appended: int = seq
        return appended

    async def model_call_used(self, budget: ModelBudget, tokens: int) -> None:
        if tokens != budget.tokens:
            delta = tokens - budget.tokens
            await self._write(MODEL_TOKENS_USED, {"keys": list(budget.keys), "delta": delta})

    async def model_call_throttled(self, keys: Sequence[str], retry_after: float | None) -> None:
        await self._write(MODEL_THROTTLED, {"keys": list(keys), "seconds": retry_after})

    async def set_model_limit(self, key: str, rpm: int | None, tpm: int | None) -> None:
        key, rpm, tpm = check_limit(key, rpm, tpm)
        await self._write(SET_MODEL_LIMIT, {"key": key, "rpm": rpm, "tpm": tpm})

    async def clear_model_limit(self, key: str) -> bool:
        return await self._write(CLEAR_MODEL_LIMIT, {"key": check_limit_key(key)}) is not None

    async def model_limits(self) -> list[ModelLimit]:
        return [ModelLimit(*row) for row in await self._read(LIST_MODEL_LIMITS, {})]

    async def fleet_budget_used(self, task_id: str, budget: ModelBudget, cost: Decimal) -> None:
        charged_at = budget.taken.by_a_budget_at
        if charged_at is not None and budget.cost is not None and cost != budget.cost:
            params = {"task": task_id, "at": charged_at, "delta": cost - budget.cost}
            await self._write(FLEET_BUDGET_USED, params)

    async def set_fleet_budget(self, budget: FleetBudget) -> bool:
        params = {
            "queue": budget.queue,
            "key": budget.concurrency_key,
            "period": budget.period,
            "amount": budget.amount,
        }
        row = await self._write(SET_FLEET_BUDGET, params)
        return bool(row and row[0])

    async def clear_fleet_budget(self, queue: str, concurrency_key: str) -> int:
        row = await self._write(CLEAR_FLEET_BUDGET, {"queue": queue, "key": concurrency_key})
        return int(row[0]) if row else 0

    async def fleet_budgets(self) -> list[FleetBudget]:
        return [FleetBudget(*row) for row in await self._read(LIST_FLEET_BUDGETS, {})]


def _exceeded(task_id: str, refused: dict[str, Any]) -> FleetBudgetExceeded:
    """The refusal the append answered (its numbers as text: exact)."""
    budget = FleetBudget(
        refused["queue"], refused["key"], refused["period"], Decimal(refused["amount"])
    )
    spent = refused["spent"]
    return FleetBudgetExceeded(task_id, budget, None if spent is None else Decimal(spent))
