"""What the client reads of a task's log: its finish (the answer), the subtasks it
launched, and its events as they come (`tail`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from noeta.core.errors import UnknownTask
from noeta.core.ports.store import Store, StoredEvent, TaskRecord
from noeta.core.rules import events

TAIL_POLL_SECONDS = 0.5  # how often a followed log is read for new events


@dataclass(frozen=True, slots=True)
class TailedEvent:
    """One event of a task's log, decoded (`UnknownEvent`: written by a newer noeta)."""

    seq: int
    event: events.Event | events.UnknownEvent
    stored: StoredEvent


async def task_row(store: Store, task_id: str) -> TaskRecord:
    """The task's row now; UnknownTask if there is none."""
    record = await store.get_task(task_id)
    if record is None:
        raise UnknownTask(task_id)
    return record


async def finish_event(store: Store, task_id: str) -> events.TaskFinished | None:
    """The task's TaskFinished, read from the end of its log."""
    record = await store.get_task(task_id)
    after = max(0, record.last_seq - 1) if record else 0
    for stored in reversed(await store.read_log(task_id, after)):
        event = events.decode(stored.type, stored.data)
        if isinstance(event, events.TaskFinished):
            return event
    return None


async def launched_subtasks(store: Store, task_id: str) -> list[tuple[str, TaskRecord]]:
    """The subtasks the task's log launched: (description, row), in launch order."""
    found = []
    for stored in await store.read_log(task_id):
        if stored.type != "SubtaskLaunched":
            continue
        launched = events.decode(stored.type, stored.data)
        if isinstance(launched, events.SubtaskLaunched):
            record = await store.get_task(launched.child_id)
            if record is not None:
                found.append((launched.description, record))
    return found


async def tail(
    store: Store, task_id: str, after: int, follow: bool
) -> AsyncGenerator[TailedEvent, None]:
    """The task's events after seq `after`; following, new ones until it finishes."""
    while True:
        # The status is read before the log: once it says finished, the read that
        # follows holds the last event.
        record = await task_row(store, task_id)
        for stored in await store.read_log(task_id, after):
            yield TailedEvent(stored.seq, events.decode(stored.type, stored.data), stored)
            after = stored.seq
        if not follow or record.status.finished:
            return
        await asyncio.sleep(TAIL_POLL_SECONDS)
