"""Bulk creation on PostgreSQL: a batch of tasks in one statement (`noeta_create_tasks`,
or `noeta_create_tasks_alike` for tasks that differ only in their id and one event, as
an `enqueue_many` batch does; queue/postgres/functions/), one transaction and one NOTIFY
per queue, all or none."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from noeta.backends.stores.postgres.appends import check_task, encode_event
from noeta.backends.stores.postgres.connection import PostgresConnection
from noeta.core.errors import Conflict
from noeta.core.ports.bulk import check_distinct_ids
from noeta.core.ports.store import NewTask, check_key

CREATE_TASKS = """
SELECT noeta_create_tasks(
    %(ids)b::text[], %(queues)b::text[], %(ready)s::timestamptz[], %(counts)b::int[],
    %(event_task)b::int[], %(event_seq)b::int[], %(types)b::text[], %(data)b::text[],
    %(keys)s::text[], %(priorities)s::int[])
"""
CREATE_TASKS_ALIKE = """
SELECT noeta_create_tasks_alike(
    %(ids)b::text[], %(own_data)b::text[], %(queue)s, %(ready)s::timestamptz, %(key)s,
    %(priority)s::int, %(types)b::text[], %(shared_data)b::text[], %(own_seq)s::int)
"""
PINNED = "PluginsPinned"

# Pruned ids stay taken (ADR-0066): a create would refuse them as it refuses a live one.
TAKEN_IDS = """
SELECT id FROM tasks WHERE id = ANY (%(ids)s)
UNION SELECT id FROM pruned_task_ids WHERE id = ANY (%(ids)s)
"""


class PostgresBulk(PostgresConnection):
    """Creating many tasks in one round trip."""

    async def create_tasks(self, tasks: Sequence[NewTask]) -> None:
        if not tasks:
            return
        check_distinct_ids(tasks)
        alike = alike_params(tasks)
        query, params = (CREATE_TASKS, any_params(tasks)) if alike is None else alike
        try:
            await self._write(query, params)
        except Conflict as error:
            # The function names the first taken id as its message.
            raise Conflict(error.reason, "the id is taken (by a task, or a pruned one)") from None

    async def taken_ids(self, ids: Sequence[str]) -> set[str]:
        if not ids:
            return set()
        return {row[0] for row in await self._read(TAKEN_IDS, {"ids": list(ids)})}


def any_params(tasks: Sequence[NewTask]) -> dict[str, Any]:
    """`noeta_create_tasks`' arrays: every task's columns, and every event of each."""
    event_task: list[int] = []
    event_seq: list[int] = []
    types: list[str] = []
    data: list[str] = []
    # Tasks may share event objects (a submit_many's creations): each is encoded once.
    encoded: dict[int, tuple[str, str]] = {}
    for number, task in enumerate(tasks, start=1):
        check_task(task)
        for seq, event in enumerate(task.events, start=1):
            type_and_data = encoded.get(id(event))
            if type_and_data is None:
                type_and_data = encoded[id(event)] = encode_event(event)
            event_task.append(number)
            event_seq.append(seq)
            types.append(type_and_data[0])
            data.append(type_and_data[1])
    return {
        "ids": [task.id for task in tasks],
        "queues": [task.queue for task in tasks],
        "ready": [task.ready_at for task in tasks],
        "counts": [len(task.events) for task in tasks],
        "event_task": event_task,
        "event_seq": event_seq,
        "types": types,
        "data": data,
        "keys": [task.concurrency_key for task in tasks],
        "priorities": [task.priority for task in tasks],
    }


def alike_params(tasks: Sequence[NewTask]) -> tuple[str, dict[str, Any]] | None:
    """`noeta_create_tasks_alike`'s statement and parameters if every task has the first
    one's queue, start, key, priority and event objects, but at most at one seq, where
    each has its own event of one type (not a pin); else None. The shared parts are
    checked and encoded once: 10,000 jobs are two arrays of 10,000 and a few values."""
    own = _own_seq(tasks)
    if own is False:
        return None
    first = tasks[0]
    check_task(first)
    layout = [encode_event(event) for event in first.events]
    if own is not None and layout[own][0] == PINNED:
        return None
    for task in tasks:
        check_key("task id", task.id)
    return CREATE_TASKS_ALIKE, {
        "ids": [task.id for task in tasks],
        "own_data": None if own is None else [encode_event(t.events[own])[1] for t in tasks],
        "queue": first.queue,
        "ready": first.ready_at,
        "key": first.concurrency_key,
        "priority": first.priority,
        "types": [event_type for event_type, _ in layout],
        "shared_data": [None if seq == own else data for seq, (_, data) in enumerate(layout)],
        "own_seq": None if own is None else own + 1,
    }


def _own_seq(tasks: Sequence[NewTask]) -> int | Literal[False] | None:
    """The one index (from 0) where the tasks' event objects differ (None: at none), or
    False if the tasks are not alike."""
    first = tasks[0]
    layout = first.events
    own: int | None = None
    for task in tasks:
        if (
            task.queue != first.queue
            or task.ready_at != first.ready_at
            or task.concurrency_key != first.concurrency_key
            or task.priority != first.priority
            or len(task.events) != len(layout)
        ):
            return False
        for seq, event in enumerate(task.events):
            if event is layout[seq]:
                continue
            if own is None:
                own = seq
            if seq != own or event.type != layout[seq].type:
                return False
    return own
