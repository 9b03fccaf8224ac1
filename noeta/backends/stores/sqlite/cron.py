"""Cron on sqlite: each schedule's mark, firing a (schedule, slot) exactly once (the steps
of PostgreSQL's `noeta_cron_fire`, under the write lock), the history of fires, and
`wake_due` (no NOTIFY here: workers find due tasks at their next poll)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime

from noeta.backends.stores.sqlite.appends import insert_task
from noeta.backends.stores.sqlite.connection import SqliteConnection
from noeta.backends.stores.sqlite.encoding import (
    encode_delivery,
    encode_task,
    from_micros,
    now_micros,
    to_micros,
)
from noeta.backends.stores.sqlite.inbox import SELECT_TASK_STATUS, insert_delivery
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

NEXT_DUE_AFTER = "SELECT min(claimable_at) FROM tasks WHERE claimable_at > ?"
REGISTER_SCHEDULE = "INSERT INTO cron_schedules (name, mark) VALUES (?, ?) ON CONFLICT DO NOTHING"
ADVANCE_SCHEDULE = "UPDATE cron_schedules SET mark = max(mark, ?) WHERE name = ?"
READ_MARK = "SELECT mark, last_task FROM cron_schedules WHERE name = ?"
INSERT_FIRE = """
INSERT INTO cron_fires (schedule, slot, outcome, fired_at) VALUES (?, ?, 'missed', ?)
    ON CONFLICT DO NOTHING
"""
RECORD_FIRE = """
UPDATE cron_fires SET outcome = ?, task_id = ?, detail = ? WHERE schedule = ? AND slot = ?
"""
SET_LAST_TASK = "UPDATE cron_schedules SET last_task = ? WHERE name = ?"
UNTAKEN_CRON_MESSAGE = """
SELECT 1 FROM inbox WHERE task_id = ? AND taken_seq IS NULL AND substr(dedupe_key, 1, ?) = ?
"""
CRON_SCHEDULE_NAMES = "SELECT name FROM cron_schedules"
CRON_HISTORY = """
SELECT schedule, slot, outcome, task_id, detail, fired_at FROM cron_fires
 WHERE schedule = ? ORDER BY slot DESC LIMIT ?
"""
_PENDING = ("ready", "running", "holding", "waiting")


class SqliteCron(SqliteConnection):
    """The scheduler's half of the `Store` protocol."""

    async def wake_due(self, since: datetime) -> tuple[datetime, datetime | None]:
        check_moment(since)
        now = now_micros()
        due = await self._run(self._read_one, NEXT_DUE_AFTER, (now,))
        return from_micros(now), None if due[0] is None else from_micros(due[0])

    async def cron_marks(
        self, schedules: Sequence[str], now: datetime, *, advance: Sequence[str] = ()
    ) -> dict[str, datetime]:
        names = [check_key("schedule name", name) for name in schedules]
        at = to_micros(check_moment(now) or now)

        def register(connection: sqlite3.Connection, _: int) -> dict[str, datetime]:
            marks = {}
            for name in names:
                connection.execute(REGISTER_SCHEDULE, (name, at))
                if name in advance:
                    connection.execute(ADVANCE_SCHEDULE, (at, name))
                marks[name] = from_micros(connection.execute(READ_MARK, (name,)).fetchone()[0])
            return marks

        return await self._run(self._write, register)

    async def fire_cron(self, fire: CronFire) -> FireOutcome:
        check_cron_fire(fire)
        action = fire.action
        task = encode_task(action) if isinstance(action, NewTask) else None
        delivery = encode_delivery(action) if isinstance(action, Delivery) else None
        slot = to_micros(fire.slot)

        def fire_once(connection: sqlite3.Connection, now: int) -> FireOutcome:
            # The same steps as PostgreSQL's noeta_cron_fire, under the write lock.
            if connection.execute(INSERT_FIRE, (fire.schedule, slot, now)).rowcount == 0:
                return FireOutcome.ALREADY
            connection.execute(REGISTER_SCHEDULE, (fire.schedule, slot))
            last_task = connection.execute(READ_MARK, (fire.schedule,)).fetchone()[1]
            outcome, task_id, detail = FireOutcome.MISSED, None, fire.detail
            if task is not None:
                last = connection.execute(SELECT_TASK_STATUS, (last_task,)).fetchone()
                if fire.overlap == "skip" and last is not None and last[0] in _PENDING:
                    outcome, detail = (
                        FireOutcome.SKIPPED_OVERLAP,
                        f"task {last_task} is still {last[0]}",
                    )
                else:
                    insert_task(connection, task, now)
                    connection.execute(SET_LAST_TASK, (task.id, fire.schedule))
                    outcome, task_id = FireOutcome.CREATED, task.id
            elif delivery is not None:
                task_id = delivery.task_id
                target = connection.execute(SELECT_TASK_STATUS, (task_id,)).fetchone()
                prefix = f"cron:{fire.schedule}:"
                if target is None or target[0] not in _PENDING:
                    state = "does not exist" if target is None else f"is {target[0]}"
                    outcome, detail = FireOutcome.NO_TARGET, f"task {task_id} {state}"
                elif (
                    fire.overlap == "skip"
                    and connection.execute(
                        UNTAKEN_CRON_MESSAGE, (task_id, len(prefix), prefix)
                    ).fetchone()
                ):
                    outcome = FireOutcome.SKIPPED_OVERLAP
                    detail = "the previous message is not taken yet"
                else:
                    insert_delivery(connection, delivery, now)
                    outcome = FireOutcome.DELIVERED
            values = (outcome.value, task_id, detail, fire.schedule, slot)
            connection.execute(RECORD_FIRE, values)
            connection.execute(ADVANCE_SCHEDULE, (slot, fire.schedule))
            return outcome

        return await self._run(self._write, fire_once)

    async def cron_history(self, schedule: str, limit: int = 20) -> list[CronFireRecord]:
        rows = await self._run(self._read_all, CRON_HISTORY, (schedule, limit))
        return [
            CronFireRecord(
                name, from_micros(slot), FireOutcome(outcome), task, detail, from_micros(at)
            )
            for name, slot, outcome, task, detail, at in rows
        ]

    async def cron_schedules(self) -> list[str]:
        rows = await self._run(self._read_all, CRON_SCHEDULE_NAMES, ())
        return sorted(name for (name,) in rows)  # by code point, whatever the collation
