"""`retry`: a failed or cancelled plain job run again as a new task (ADR-0094), with the
same function, input, pin, queue, concurrency key and priority (each unless given); its
CallRequested names the task it retries. An
agent task is forked at its last good step (ADR-0091). A finished log never grows, so
the retried task stays as it ended."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypedDict

from noeta.client.creating import create_once
from noeta.client.handles import TaskHandle
from noeta.client.task_logs import task_row
from noeta.core.errors import NoetaError
from noeta.core.ports.store import NewEvent, NewTask, Store, TaskStatus, check_key
from noeta.core.rules import events

RETRYABLE = (TaskStatus.FAILED, TaskStatus.CANCELLED)


class Given(TypedDict, total=False):
    """What a retry may change; what is not given is the retried task's."""

    key: str | None  # the concurrency key (a tenant)
    priority: int | None
    queue: str | None


async def retry(
    open_store: Callable[[], Awaitable[Store]],
    task_id: str,
    new_task_id: str,
    *,
    key: str | None = None,
    priority: int | None = None,
    queue: str | None = None,
) -> TaskHandle:
    """Create the job's retry as task `new_task_id`, in `queue` with `key` and `priority`
    (None: the source's); a task that is neither a failed or cancelled plain job nor an
    agent task is refused with one line saying why."""
    store = await open_store()
    record = await task_row(store, task_id)
    # A job's log starts with its creation, its call and its pin, written together.
    try:
        first = [events.decode(e.type, e.data) for e in (await store.read_log(task_id))[:3]]
    except ValueError as error:
        raise NoetaError(f"task {task_id} has a log this noeta cannot read: {error}") from None
    call = first[1] if len(first) > 1 else None
    if record.status not in RETRYABLE:
        said = "ran to its end" if record.status is TaskStatus.DONE else "has not ended"
        kind = "job" if isinstance(call, events.CallRequested) else "task"
        raise NoetaError(
            f"task {task_id} is {record.status.value}: it {said}; only a failed or "
            f"cancelled {kind} can be retried"
        )
    if not isinstance(call, events.CallRequested):
        return await _agent_retry(store, task_id, new_task_id, queue)
    again = events.CallRequested(call.call_id, call.name, call.input, retry_of=task_id)
    kept = [e for e in first[:3] if isinstance(e, events.TaskCreated | events.PluginsPinned)]
    log = [NewEvent(*events.encode(event)) for event in (kept[0], again, *kept[1:])]
    task = NewTask(
        new_task_id,
        log,
        queue=record.queue if queue is None else check_key("queue name", queue),
        concurrency_key=record.concurrency_key if key is None else key,
        priority=record.priority if priority is None else priority,
    )
    await create_once(store, task)
    return TaskHandle(new_task_id, task.queue)


async def _agent_retry(
    store: Store, task_id: str, new_task_id: str, queue: str | None
) -> TaskHandle:
    """An agent task run again from its last good step: a fork there (ADR-0091), so no
    model call before it is re-sent and no tool re-run."""
    from noeta.client import forking  # the fold: kept out of commands that need none

    at = forking.last_good_step(await store.read_log(task_id))
    if at is None:
        raise NoetaError(f"task {task_id} has no step to run again from")
    task = await forking.fork(
        store, task_id, at, new_id=new_task_id, queue=queue, change=forking.ForkChange()
    )
    return TaskHandle(task.id, task.queue)
