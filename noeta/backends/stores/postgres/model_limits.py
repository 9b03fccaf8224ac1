"""Shared model-call limits on PostgreSQL: the statements call the functions in
`queue/postgres/functions/` (`noeta_append_model_called`…), which hold the budget's
rules (ADR-0075)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from noeta.backends.stores.postgres.appends import events_json
from noeta.backends.stores.postgres.connection import PostgresConnection
from noeta.backends.stores.postgres.group_commit import LeanAppend
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
SELECT seq, retry_at, limit_key, limited FROM noeta_append_model_called(
    %(task)s, %(epoch)s, %(expected_seq)s, %(events)s::jsonb, %(keys)s::text[], %(tokens)s)
"""
# The same append for a task whose jobs need its claim: a refusal keeps it (0015).
APPEND_MODEL_CALLED_KEEPING_CLAIM = """
SELECT seq, retry_at, limit_key, limited FROM noeta_append_model_called_keeping_claim(
    %(task)s, %(epoch)s, %(expected_seq)s, %(events)s::jsonb, %(keys)s::text[], %(tokens)s)
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
        budget.taken.by_a_limit = False
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
        }
        statement = APPEND_MODEL_CALLED_KEEPING_CLAIM if budget.keep_claim else APPEND_MODEL_CALLED
        row = await self._write(statement, params, task_id=claim.task_id)
        assert row is not None
        seq, retry_at, limit_key, budget.taken.by_a_limit = row
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
