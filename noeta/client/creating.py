"""Creating tasks safe to retry: a write whose reply was lost (`CommitUnknown`) is sent
again with the same ids, and an id found taken counts as success only when the task that
holds it is the one sent (same queue, same first events), so a lost reply never makes a
duplicate and never reaches the caller unless the retries run out."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence

from noeta.core.errors import CommitUnknown, ConfigError, Conflict, StoreUnavailable
from noeta.core.ports.bulk import BulkCreate
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.store import NewTask, Store

log = logging.getLogger(__name__)

# Sends after a lost reply, and the waits between them: a server that restarts or a
# connection that is reset is back within a few seconds, and no wait races a step.
RESENDS = 5
FIRST_WAIT_SECONDS = 0.05
MAX_WAIT_SECONDS = 2.0


class TaskExists(ConfigError):
    """The id was taken by another task (or a pruned one): nothing was written."""

    def __init__(self, message: str, task_id: str) -> None:
        super().__init__(message)
        self.task_id = task_id


async def create_once(store: Store, task: NewTask) -> None:
    """Create `task`; raises TaskExists if its id is another task's."""
    for resend in range(RESENDS + 1):
        try:
            if await store.create_task(task):
                return
            # Taken. After a lost reply, by the write that lost it? (The read may fail
            # as the write did: then send again.)
            if resend > 0 and await _is_ours(store, task):
                return
        except (CommitUnknown, StoreUnavailable) as error:
            await before_resend(error, resend, [task.id])
            continue
        raise TaskExists(
            f"a task with id {task.id!r} exists already (or existed and was pruned)", task.id
        )
    raise AssertionError("unreachable")


async def create_batch(store: Store, tasks: Sequence[NewTask], kind: str) -> None:
    """`create_all_once` through the store's bulk port, or ConfigError if it has none."""
    bulk = store.capabilities.bulk
    if bulk is None:
        raise ConfigError(f"this store ({type(store).__name__}) cannot create in bulk")
    await create_all_once(store, bulk, tasks, kind)


async def create_all_once(
    store: Store, bulk: BulkCreate, tasks: Sequence[NewTask], kind: str = "task"
) -> None:
    """Create every task in one transaction; raises TaskExists naming the first taken id
    and its index in the batch ("<kind> 3 of the batch"). The batch is all or nothing,
    so one task of it found to be ours means all landed."""
    for resend in range(RESENDS + 1):
        try:
            await bulk.create_tasks(tasks)
            return
        except Conflict as error:
            refused = error
        except (CommitUnknown, StoreUnavailable) as error:
            await before_resend(error, resend, [task.id for task in tasks])
            continue
        taken = refused.task_id
        index = next((i for i, task in enumerate(tasks) if task.id == taken), None)
        if index is None:
            raise refused
        try:
            if resend > 0 and await _is_ours(store, tasks[index]):
                return
        except (CommitUnknown, StoreUnavailable) as error:
            await before_resend(error, resend, [task.id for task in tasks])
            continue
        raise TaskExists(
            f"{kind} {index} of the batch (id {taken!r}): a task with this id "
            "exists already (or existed and was pruned); nothing of the batch was written",
            taken,
        )
    raise AssertionError("unreachable")


async def before_resend(
    error: CommitUnknown | StoreUnavailable, resend: int, ids: Sequence[str]
) -> None:
    """Wait before sending again, or give up: re-raise with the ids, so the caller can
    send again later (same ids) without making a duplicate."""
    if isinstance(error, StoreUnavailable) and resend == 0:
        raise error  # nothing was sent: the caller's to decide (nothing can be duplicated)
    if resend == RESENDS:
        named = ids[0] if len(ids) == 1 else f"{ids[0]!r} … ({len(ids)} tasks)"
        raise CommitUnknown(
            f"{error}; sent {RESENDS + 1} times without an answer: it may or may not have "
            f"landed. Send it again with the same id(s) (id {named}) to be sure: that never "
            "makes a duplicate"
        ) from None
    wait = min(MAX_WAIT_SECONDS, FIRST_WAIT_SECONDS * 2**resend)
    log.info("client: %s; sending the same task(s) again in %.2fs", error, wait)
    await asyncio.sleep(wait)


async def _is_ours(store: Store, task: NewTask) -> bool:
    """Whether the task holding `task.id` is the one sent: its queue and first events
    (the worker may have appended more since)."""
    row = await store.get_task(task.id)
    if row is None or row.queue != task.queue:
        return False
    stored = (await store.read_log(task.id))[: len(task.events)]
    return [(event.type, _normal(event.data)) for event in stored] == [
        (event.type, _normal(event.data)) for event in task.events
    ]


def _normal(value: JSONValue) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)
