"""Shared model-call limits on sqlite: the budget's rules of PostgreSQL's
`noeta_append_model_called` (queue/postgres/functions/), step for step, in the
client under the append's write lock; times in microseconds."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from noeta.backends.stores.sqlite.appends import (
    CONTINUE_TASK,
    check_fence,
    insert_claimed_events,
    latest_pin,
)
from noeta.backends.stores.sqlite.connection import SqliteConnection
from noeta.backends.stores.sqlite.encoding import encode_events, from_micros, now_micros
from noeta.backends.stores.sqlite.fleet_budgets import charge, fleet_budgets_of
from noeta.core.ports.fleet_budgets import FleetBudgetExceeded
from noeta.core.ports.model_limits import (
    ModelBudget,
    ModelBudgetHeld,
    ModelBudgetWait,
    ModelLimit,
    check_limit,
    check_limit_key,
)
from noeta.core.ports.store import Claim, NewEvent, check_append

MINUTE_MICROS = 60_000_000

READ_HOLD = "SELECT until, limit_key FROM model_limit_holds WHERE task_id = ?"
DROP_HOLD = "DELETE FROM model_limit_holds WHERE task_id = ?"
PUT_HOLD = "INSERT INTO model_limit_holds (task_id, until, limit_key) VALUES (?, ?, ?)"
READ_LIMITS = """
SELECT key, rpm, tpm, requests_at, tokens_at, paused_until
  FROM model_limits WHERE key IN (SELECT value FROM json_each(?)) ORDER BY key"""
TAKE_BUDGET = """
UPDATE model_limits SET
    requests_at = CASE WHEN rpm IS NULL THEN NULL ELSE
        max(coalesce(requests_at, :at), :at) + :minute / rpm END,
    tokens_at = CASE WHEN tpm IS NULL THEN NULL ELSE
        max(coalesce(tokens_at, :at), :at) + :minute * :tokens / tpm END,
    calls = calls + :calls
 WHERE key IN (SELECT value FROM json_each(:keys))"""
COUNT_CALL = (
    "UPDATE model_limits SET calls = calls + 1 WHERE key IN (SELECT value FROM json_each(?))"
)
COUNT_HANDBACK = """
UPDATE model_limits SET handbacks = handbacks + 1, waited_seconds = waited_seconds + ?
 WHERE key = ?"""
HAND_BACK = """
UPDATE tasks SET status = 'ready', lease_until = NULL, ready_at = :at, claimable_at = :at,
       updated_at = :now
 WHERE id = :task_id"""
TOKENS_USED = """
UPDATE model_limits SET tokens_at = tokens_at + ? * ? / tpm
 WHERE key IN (SELECT value FROM json_each(?)) AND tpm IS NOT NULL AND tokens_at IS NOT NULL"""
THROTTLED = """
UPDATE model_limits SET throttled = throttled + 1,
       paused_until = CASE WHEN :until IS NULL THEN paused_until ELSE
           max(coalesce(paused_until, :until), :until) END
 WHERE key IN (SELECT value FROM json_each(:keys))"""
SET_LIMIT = """
INSERT INTO model_limits (key, rpm, tpm) VALUES (?, ?, ?)
ON CONFLICT (key) DO UPDATE SET rpm = excluded.rpm, tpm = excluded.tpm"""
CLEAR_LIMIT = "DELETE FROM model_limits WHERE key = ?"
# The slots it held for tasks go with it: a call no limit applies to takes no hold.
CLEAR_HOLDS = "DELETE FROM model_limit_holds WHERE limit_key = ?"
LIST_LIMITS = """
SELECT key, rpm, tpm, CASE WHEN paused_until > ? THEN paused_until END,
       calls, handbacks, waited_seconds, throttled
  FROM model_limits ORDER BY key"""


class SqliteModelLimits(SqliteConnection):
    """The `ModelLimiter` on sqlite: one row per limit, written under the append's lock."""

    async def append_model_called(
        self, claim: Claim, expected_seq: int, events: Sequence[NewEvent], budget: ModelBudget
    ) -> int:
        check_append(events, ())
        encoded = encode_events(events)
        keys = _json_list(budget.keys)

        def append_within_budget(
            connection: sqlite3.Connection, now: int
        ) -> int | tuple[int, str] | FleetBudgetExceeded:
            owner = check_fence(connection, claim, expected_seq, now)
            budgets = fleet_budgets_of(connection, claim.task_id, budget.cost, now)
            if isinstance(budgets, FleetBudgetExceeded):
                return budgets  # raised once the transaction commits its count
            hold = connection.execute(READ_HOLD, (claim.task_id,)).fetchone()
            connection.execute(DROP_HOLD, (claim.task_id,))
            pause: tuple[int, str] | None = None
            slot, slot_key = now, ""
            budget.taken.by_a_limit, budget.taken.by_a_budget_at = False, None
            for key, rpm, tpm, requests_at, tokens_at, paused_until in connection.execute(
                READ_LIMITS, (keys,)
            ):
                budget.taken.by_a_limit = True
                paused = paused_until is not None and paused_until > now
                if paused and (pause is None or paused_until > pause[0]):
                    pause = (paused_until, key)
                for at in (requests_at if rpm else None, tokens_at if tpm else None):
                    if at is not None and at > slot:
                        slot, slot_key = at, key
            if pause is not None:
                # Paused: a new slot after the pause, spaced like any other.
                retry = (max(slot, pause[0]), f"{pause[1]} (paused after a 429)")
                self._take(connection, keys, budget.tokens, retry[0], 0)
                connection.execute(PUT_HOLD, (claim.task_id, retry[0], pause[1]))
            elif hold is not None and hold[0] > now:
                retry = (hold[0], hold[1])  # back before its slot: it keeps waiting for it
                connection.execute(PUT_HOLD, (claim.task_id, hold[0], hold[1]))
            elif hold is None and slot > now:
                retry = (slot, slot_key)
                self._take(connection, keys, budget.tokens, slot, 0)
                connection.execute(PUT_HOLD, (claim.task_id, slot, slot_key))
            else:
                if hold is None:
                    self._take(connection, keys, budget.tokens, now, 1)
                else:  # its slot was charged when it was reserved
                    connection.execute(COUNT_CALL, (keys,))
                if budgets:  # the estimate now; the rest after the reply
                    budget.taken.by_a_budget_at = charge(connection, budgets, budget.cost, now)
                seq = insert_claimed_events(connection, claim, expected_seq, encoded, now, owner)
                continued = {"seq": seq, "now": now, "task_id": claim.task_id}
                connection.execute(CONTINUE_TASK, {**continued, "pin": latest_pin(encoded)})
                return seq
            waited = (retry[0] - now) / 1e6
            connection.execute(COUNT_HANDBACK, (waited, retry[1].split(" ")[0]))
            if not budget.keep_claim:  # else its jobs need the claim: it waits inside it
                connection.execute(
                    HAND_BACK, {"at": retry[0], "now": now, "task_id": claim.task_id}
                )
            return retry

        outcome = await self._run(self._write, append_within_budget)
        if isinstance(outcome, FleetBudgetExceeded):
            raise outcome
        if isinstance(outcome, tuple) and budget.keep_claim:
            raise ModelBudgetHeld(claim.task_id, outcome[1], from_micros(outcome[0]))
        if isinstance(outcome, tuple):
            raise ModelBudgetWait(claim.task_id, outcome[1], from_micros(outcome[0]))
        return outcome

    @staticmethod
    def _take(connection: sqlite3.Connection, keys: str, tokens: int, at: int, calls: int) -> None:
        values = {"keys": keys, "tokens": tokens, "at": at, "calls": calls, "minute": MINUTE_MICROS}
        connection.execute(TAKE_BUDGET, values)

    async def model_call_used(self, budget: ModelBudget, tokens: int) -> None:
        if tokens != budget.tokens:
            values = (tokens - budget.tokens, MINUTE_MICROS, _json_list(budget.keys))
            await self._run(self._write, lambda c, now: c.execute(TOKENS_USED, values))

    async def model_call_throttled(self, keys: Sequence[str], retry_after: float | None) -> None:
        def throttle(connection: sqlite3.Connection, now: int) -> None:
            until = None if retry_after is None else now + int(retry_after * 1e6)
            connection.execute(THROTTLED, {"until": until, "keys": _json_list(keys)})

        await self._run(self._write, throttle)

    async def set_model_limit(self, key: str, rpm: int | None, tpm: int | None) -> None:
        values = check_limit(key, rpm, tpm)
        await self._run(self._write, lambda c, now: c.execute(SET_LIMIT, values))

    async def clear_model_limit(self, key: str) -> bool:
        values = (check_limit_key(key),)

        def clear(connection: sqlite3.Connection, now: int) -> bool:
            connection.execute(CLEAR_HOLDS, values)
            return bool(connection.execute(CLEAR_LIMIT, values).rowcount > 0)

        return await self._run(self._write, clear)

    async def model_limits(self) -> list[ModelLimit]:
        rows = await self._run(lambda: self._read_all(LIST_LIMITS, (now_micros(),)))
        return [
            ModelLimit(key, rpm, tpm, None if paused is None else from_micros(paused), *rest)
            for key, rpm, tpm, paused, *rest in rows
        ]


def _json_list(keys: Sequence[str]) -> str:
    return json.dumps(list(keys))
