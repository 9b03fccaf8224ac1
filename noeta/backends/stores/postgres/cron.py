"""Cron on PostgreSQL: each schedule's mark, firing a (schedule, slot) exactly once
(`noeta_cron_fire`), and the history of fires."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from noeta.backends.stores.postgres.appends import encode_task
from noeta.backends.stores.postgres.connection import PostgresConnection
from noeta.backends.stores.postgres.inbox import dedupe_key
from noeta.core.ports import payload
from noeta.core.ports.store import (
    CronFire,
    CronFireRecord,
    Delivery,
    FireOutcome,
    NewTask,
    check_cron_fire,
    check_key,
    check_moment,
)

# Registers new schedules at `now`, moves the `advance` ones (disabled) up to it, and
# reads every mark. Run every second by every scheduler: DO NOTHING leaves an existing row
# untouched (DO UPDATE would lock it, and write, each time). Rows this statement wrote
# come from `registered` and `advanced`; the rest from the table.
CRON_MARKS = """
WITH registered AS (
    INSERT INTO cron_schedules (name, mark)
    SELECT unnest(%(names)s::text[]), %(now)s
        ON CONFLICT (name) DO NOTHING
    RETURNING name, mark
), advanced AS (
    UPDATE cron_schedules SET mark = %(now)s
     WHERE name = ANY(%(advance)s::text[]) AND mark < %(now)s
    RETURNING name, mark
)
SELECT name, mark FROM registered
UNION ALL
SELECT name, mark FROM advanced
UNION ALL
SELECT name, mark FROM cron_schedules
 WHERE name = ANY(%(names)s::text[])
   AND name NOT IN (SELECT name FROM registered)
   AND name NOT IN (SELECT name FROM advanced)
"""
FIRE_CRON = """
SELECT noeta_cron_fire(%(schedule)s, %(slot)s, %(kind)s, %(overlap)s, %(detail)s, %(task)s,
                       %(queue)s, %(types)s, %(data)s, %(key)s, %(payload)s,
                       %(concurrency_key)s, %(priority)s)
"""
CRON_SCHEDULE_NAMES = "SELECT name FROM cron_schedules"
CRON_HISTORY = """
SELECT schedule, slot, outcome, task_id, detail, fired_at FROM cron_fires
 WHERE schedule = %(schedule)s ORDER BY slot DESC LIMIT %(limit)s
"""


class PostgresCron(PostgresConnection):
    """The scheduler's cron half of the `Store` protocol."""

    async def cron_marks(
        self, schedules: Sequence[str], now: datetime, *, advance: Sequence[str] = ()
    ) -> dict[str, datetime]:
        names = [check_key("schedule name", name) for name in schedules]
        params = {"names": names, "now": check_moment(now), "advance": list(advance)}
        return {name: mark for name, mark in await self._write_many(CRON_MARKS, params)}

    async def fire_cron(self, fire: CronFire) -> FireOutcome:
        check_cron_fire(fire)
        action = fire.action
        params: dict[str, Any] = {
            "schedule": fire.schedule,
            "slot": fire.slot,
            "overlap": fire.overlap,
            "detail": fire.detail,
            "kind": "missed",
            "task": None,
            "queue": None,
            "types": None,
            "data": None,
            "key": None,
            "payload": None,
            "concurrency_key": None,
            "priority": 0,
        }
        if isinstance(action, NewTask):
            types, data = encode_task(action)
            params |= {"kind": "task", "task": action.id, "queue": action.queue}
            params |= {"types": types, "data": data}
            params |= {"concurrency_key": action.concurrency_key, "priority": action.priority}
        elif isinstance(action, Delivery):
            params |= {"kind": "message", "task": action.task_id, "key": dedupe_key(action)}
            params["payload"] = payload.encode(action.payload)
        row = await self._write(FIRE_CRON, params)
        assert row is not None
        return FireOutcome(row[0])

    async def cron_history(self, schedule: str, limit: int = 20) -> list[CronFireRecord]:
        rows = await self._read(CRON_HISTORY, {"schedule": schedule, "limit": limit})
        return [
            CronFireRecord(name, slot, FireOutcome(outcome), task, detail, fired_at)
            for name, slot, outcome, task, detail, fired_at in rows
        ]

    async def cron_schedules(self) -> list[str]:
        return sorted(name for (name,) in await self._read(CRON_SCHEDULE_NAMES, {}))  # as sqlite
