"""Fleet budgets on sqlite (ADR-0110): PostgreSQL's steps in the client, under the
ModelCalled append's write lock (`model_limits.py` calls `fleet_budgets_of` and `charge`);
amounts and spends are decimal text, added as Decimals; times are microseconds."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal

from noeta.backends.stores.sqlite.connection import SqliteConnection
from noeta.backends.stores.sqlite.encoding import from_micros
from noeta.core.ports.fleet_budgets import FleetBudget, FleetBudgetExceeded, period_start
from noeta.core.ports.model_limits import ModelBudget

ANY_FLEET_BUDGET = "SELECT 1 FROM fleet_budgets LIMIT 1"
TASK_BUDGETS = """
SELECT f.queue, f.concurrency_key, f.period, f.amount, f.spent, f.period_start
  FROM fleet_budgets AS f JOIN tasks AS t ON t.id = ?
 WHERE f.queue = t.queue AND f.concurrency_key IN ('', coalesce(t.concurrency_key, ''))
 ORDER BY f.queue, f.concurrency_key, f.period"""
CHARGE_BUDGET = """
UPDATE fleet_budgets SET spent = ?, period_start = ?, calls = calls + ?, refusals = refusals + ?
 WHERE queue = ? AND concurrency_key = ? AND period = ?"""
SET_BUDGET = """
INSERT INTO fleet_budgets (queue, concurrency_key, period, amount) VALUES (?, ?, ?, ?)
ON CONFLICT (queue, concurrency_key, period) DO UPDATE SET amount = excluded.amount"""
QUEUE_KNOWN = """
SELECT EXISTS (SELECT 1 FROM queue_settings WHERE queue = ?)
    OR EXISTS (SELECT 1 FROM tasks WHERE queue = ?)"""
CLEAR_BUDGET = "DELETE FROM fleet_budgets WHERE queue = ? AND concurrency_key = ?"
LIST_BUDGETS = """
SELECT queue, concurrency_key, period, amount, spent, period_start, calls, refusals
  FROM fleet_budgets ORDER BY queue, concurrency_key, period"""


class SqliteFleetBudgets(SqliteConnection):
    """The fleet budgets' settings and the reply's correction (the `ModelLimiter`'s part)."""

    async def fleet_budget_used(self, task_id: str, budget: ModelBudget, cost: Decimal) -> None:
        charged_at = budget.taken.by_a_budget_at
        if charged_at is None or budget.cost is None or cost == budget.cost:
            return
        delta, moment = cost - budget.cost, charged_at

        def correct(connection: sqlite3.Connection, now: int) -> None:
            for row in connection.execute(TASK_BUDGETS, (task_id,)).fetchall():
                each = _budget(row)
                if each.period_start == period_start(each.period, moment):
                    spent = max(Decimal(0), each.spent + delta)
                    _charge(connection, each, spent, None, calls=0)

        await self._run(self._write, correct)

    async def set_fleet_budget(self, budget: FleetBudget) -> bool:
        values = (budget.queue, budget.concurrency_key, budget.period, str(budget.amount))

        def set_budget(connection: sqlite3.Connection, now: int) -> bool:
            connection.execute(SET_BUDGET, values)
            return bool(connection.execute(QUEUE_KNOWN, (budget.queue,) * 2).fetchone()[0])

        return await self._run(self._write, set_budget)

    async def clear_fleet_budget(self, queue: str, concurrency_key: str) -> int:
        values = (queue, concurrency_key)
        return await self._run(
            self._write, lambda c, now: int(c.execute(CLEAR_BUDGET, values).rowcount)
        )

    async def fleet_budgets(self) -> list[FleetBudget]:
        rows = await self._run(lambda: self._read_all(LIST_BUDGETS, ()))
        return [_budget(row) for row in rows]


def _budget(row: Sequence[object]) -> FleetBudget:
    queue, key, period, amount, spent, start, *counts = row
    return FleetBudget(
        str(queue),
        str(key),
        str(period),
        Decimal(str(amount)),
        Decimal(str(spent)),
        None if start is None else from_micros(int(str(start))),
        *(int(str(count)) for count in counts),
    )


def fleet_budgets_of(
    connection: sqlite3.Connection, task_id: str, cost: Decimal | None, now: int
) -> list[tuple[FleetBudget, Decimal]] | FleetBudgetExceeded:
    """The fleet budgets of the task's queue and key, each with its current period's
    spend; or the refusal (counted, nothing else written) of one `cost` would take past
    its amount, or of any when the cost is unknown: PostgreSQL's steps."""
    if connection.execute(ANY_FLEET_BUDGET).fetchone() is None:
        return []
    moment = from_micros(now)
    found = []
    for row in connection.execute(TASK_BUDGETS, (task_id,)).fetchall():
        each = _budget(row)
        current = period_start(each.period, moment)
        spent = each.spent if each.period_start == current else Decimal(0)
        if cost is None or spent + cost > each.amount:
            connection.execute(
                CHARGE_BUDGET,
                (str(each.spent), _micros_of(each), 0, 1, *_key_of(each)),
            )
            return FleetBudgetExceeded(task_id, each, None if cost is None else spent)
        found.append((each, spent))
    return found


def _charge(
    connection: sqlite3.Connection, each: FleetBudget, spent: Decimal, now: int | None, calls: int
) -> None:
    """Its spend set (and, with `now`, its period started afresh where it moved on)."""
    start = (
        _micros_of(each)
        if now is None
        else int(period_start(each.period, from_micros(now)).timestamp() * 1_000_000)
    )
    connection.execute(CHARGE_BUDGET, (str(spent), start, calls, 0, *_key_of(each)))


def _micros_of(each: FleetBudget) -> int | None:
    start = each.period_start
    return None if start is None else int(start.timestamp() * 1_000_000)


def _key_of(each: FleetBudget) -> tuple[str, str, str]:
    return each.queue, each.concurrency_key, each.period


def charge(
    connection: sqlite3.Connection,
    budgets: list[tuple[FleetBudget, Decimal]],
    cost: Decimal | None,
    now: int,
) -> datetime:
    """A call's estimated cost added to each budget's current spend; when it was charged."""
    for each, spent in budgets:
        _charge(connection, each, spent + (cost or 0), now, calls=1)
    return from_micros(now)
