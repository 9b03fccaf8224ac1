"""`retry`: a failed or cancelled plain job run again as a new task (ADR-0094), with the
same function, input, pin, queue, concurrency key and priority (each unless given); its
CallRequested names the task it retries. An
agent task is forked at its last good step (ADR-0091). A finished log never grows, so
the retried task stays as it ended. With `force`, a done task is run again the same way."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from noeta.client.creating import create_once
from noeta.client.handles import TaskHandle
from noeta.client.task_logs import task_row
from noeta.core.errors import NoetaError
from noeta.core.ports.store import (
    NewEvent,
    NewTask,
    Store,
    StoredEvent,
    TaskRecord,
    TaskStatus,
    check_key,
)
from noeta.core.rules import events

RETRYABLE = (TaskStatus.FAILED, TaskStatus.CANCELLED)


async def retry(
    open_store: Callable[[], Awaitable[Store]],
    task_id: str,
    new_task_id: str,
    *,
    key: str | None = None,
    priority: int | None = None,
    queue: str | None = None,
    force: bool = False,
) -> TaskHandle:
    """Create the job's retry as task `new_task_id`, in `queue` with `key` and `priority`
    (None: the source's); a task that is not a failed or cancelled plain job (or, with
    `force`, a done one) is refused with one line saying why."""
    store = await open_store()
    record = await task_row(store, task_id)
    task = await retried_task(
        store, record, new_task_id, key=key, priority=priority, queue=queue, force=force
    )
    await create_once(store, task)
    return TaskHandle(new_task_id, task.queue)


async def retried_task(
    store: Store,
    record: TaskRecord,
    new_task_id: str,
    *,
    key: str | None = None,
    priority: int | None = None,
    queue: str | None = None,
    force: bool = False,
    opening: Sequence[StoredEvent] | None = None,
) -> NewTask:
    """The retry of `record`'s task as task `new_task_id`, not yet created (a bulk retry
    creates a batch of them at once); NoetaError saying why if it cannot be retried.
    `opening`: the log's first events if read already (enough for a job; an agent
    task's whole log is read here)."""
    task_id = record.id
    into = record.queue if queue is None else check_key("queue name", queue)
    log = await store.read_log(task_id) if opening is None else opening
    # A job's log starts with its creation, its call and its pin, written together.
    try:
        first = [events.decode(e.type, e.data) for e in log[:3]]
    except ValueError as error:
        raise NoetaError(f"task {task_id} has a log this noeta cannot read: {error}") from None
    call = first[1] if len(first) > 1 else None
    if record.status not in RETRYABLE and not (force and record.status is TaskStatus.DONE):
        said = "ran to its end" if record.status is TaskStatus.DONE else "has not ended"
        kind = "job" if isinstance(call, events.CallRequested) else "task"
        forced = " (or, with --force, a done one)" if record.status is TaskStatus.DONE else ""
        raise NoetaError(
            f"task {task_id} is {record.status.value}: it {said}; only a failed or "
            f"cancelled {kind}{forced} can be retried"
        )
    if not isinstance(call, events.CallRequested):
        if opening is not None:
            log = await store.read_log(task_id)
        done = record.status is TaskStatus.DONE
        # Folding a long log takes a while: off the loop (a web view's bulk retry serves
        # other pages meanwhile).
        return await asyncio.to_thread(_agent_retry, log, task_id, new_task_id, into, new_work=done)
    again = events.CallRequested(call.call_id, call.name, call.input, retry_of=task_id)
    kept = [e for e in first[:3] if isinstance(e, events.TaskCreated | events.PluginsPinned)]
    log_events = [NewEvent(*events.encode(event)) for event in (kept[0], again, *kept[1:])]
    return NewTask(
        new_task_id,
        log_events,
        queue=into,
        concurrency_key=record.concurrency_key if key is None else key,
        priority=record.priority if priority is None else priority,
    )


def _agent_retry(
    log: Sequence[StoredEvent], task_id: str, new_task_id: str, queue: str, *, new_work: bool
) -> NewTask:
    """An agent task run again from its last good step: a fork there (ADR-0091), so no
    model call before it is re-sent and no tool re-run."""
    from noeta.client import forking  # the fold: kept out of commands that need none

    at = forking.last_good_step(log, new_work=new_work)
    if at is None:
        raise NoetaError(f"task {task_id} has no step to run again from")
    copied = forking.forked_events(task_id, log, at, forking.ForkChange())
    return NewTask(new_task_id, copied, queue=queue)
