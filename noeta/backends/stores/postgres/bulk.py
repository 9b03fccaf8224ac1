"""Bulk creation on PostgreSQL: a batch of tasks in one statement (`noeta_create_tasks`,
queue/postgres/functions/), one transaction and one NOTIFY per queue, all or none."""

from __future__ import annotations

from collections.abc import Sequence

from noeta.backends.stores.postgres.appends import check_task, encode_event
from noeta.backends.stores.postgres.connection import PostgresConnection
from noeta.core.errors import Conflict
from noeta.core.ports.bulk import check_distinct_ids
from noeta.core.ports.store import NewTask

CREATE_TASKS = """
SELECT noeta_create_tasks(
    %(ids)b::text[], %(queues)b::text[], %(ready)s::timestamptz[], %(counts)b::int[],
    %(event_task)b::int[], %(event_seq)b::int[], %(types)b::text[], %(data)b::text[],
    %(keys)s::text[], %(priorities)s::int[])
"""

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
        event_task: list[int] = []
        event_seq: list[int] = []
        types: list[str] = []
        data: list[str] = []
        # A batch's jobs share their creation and pin events (one object each): each
        # object is encoded once (most of the client's time for a batch of 10,000 jobs).
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
        params = {
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
        try:
            await self._write(CREATE_TASKS, params)
        except Conflict as error:
            # The function names the first taken id as its message.
            raise Conflict(error.reason, "the id is taken (by a task, or a pruned one)") from None

    async def taken_ids(self, ids: Sequence[str]) -> set[str]:
        if not ids:
            return set()
        return {row[0] for row in await self._read(TAKEN_IDS, {"ids": list(ids)})}
