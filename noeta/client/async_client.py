"""`AsyncClient`: noeta from Python: submit agent tasks, enqueue plain jobs, await their
results, follow their logs, message, answer and cancel them. The CLI is a layer on it.

The store is the one the CLI would use: a URL, else `NOETA_STORE`, else the embedded
PostgreSQL. It is opened at first use and closed by `close()` (or `async with`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Unpack

from noeta.client import job_tasks, messages, submissions, task_logs, unique_jobs
from noeta.client.canvas_calls import CanvasCalls
from noeta.client.creating import create_batch, create_once
from noeta.client.handles import TaskHandle
from noeta.client.in_flight import CallsInFlight, tracked
from noeta.client.queue_calls import QueueSettingsCalls
from noeta.client.retry_calls import RetryCalls
from noeta.client.stream_calls import StreamCalls
from noeta.client.submissions import (
    DEFAULT_MODEL,
    Submission,
    agent_task,
    in_batch,
    new_id,
    with_batch_defaults,
)
from noeta.client.task_logs import TailedEvent
from noeta.client.waiting import FinishWatcher
from noeta.core.errors import ConfigError, NoetaError, TaskCancelled, TaskFailed
from noeta.core.ports.bulk import check_distinct_ids
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.store import (
    DEFAULT_PRIORITY,
    DEFAULT_QUEUE,
    Store,
    TaskRecord,
    TaskStatus,
    check_key,
)
from noeta.core.ports.store_values import check_text

if TYPE_CHECKING:  # the config (and YAML) only for what reads one: submit, enqueue
    from noeta.client.task_costs import TaskUsage
    from noeta.config import Config
    from noeta.core.rules.prices import Price


TaskRef = str | TaskHandle


class AsyncClient(QueueSettingsCalls, RetryCalls, CanvasCalls, StreamCalls):
    def __init__(
        self,
        store: str | None = None,
        *,
        config: str | Config | None = None,
        application_name: str = "noeta-client",
        start_embedded: bool = True,
        max_connections: int = 10,
        session_url: str | None = None,
    ) -> None:
        """`max_connections`: the client's pool; calls beyond it wait for a connection
        (up to the store's deadline), so many concurrent calls want a bigger pool, or
        `enqueue_many` (one connection for a whole batch). `session_url`: PostgreSQL's
        own URL behind a pooler (else $NOETA_STORE_SESSION; ADR-0106)."""
        self._url, self._session_url = store, session_url
        self._max_connections = max_connections
        self._config = config
        self._application_name = application_name
        # False for what only reads: no URL and no embedded server running is an error,
        # never a new server made as a side effect.
        self._start_embedded = start_embedded
        self._store: Store | None = None
        self._watcher: FinishWatcher | None = None  # what result() waits with, one listener
        self._opening = asyncio.Lock()
        self._calls = CallsInFlight()

    async def __aenter__(self) -> AsyncClient:
        await self.store()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def store(self) -> Store:
        """The open store (opened on first use)."""
        async with self._opening:
            if self._store is None:
                from noeta.backends.stores import open_store

                self._store = await open_store(
                    self._url,
                    session_url=self._session_url,
                    application_name=self._application_name,
                    start_embedded=self._start_embedded,
                    max_connections=self._max_connections,
                )
                self._watcher = FinishWatcher(self._store)
            return self._store

    async def close(self) -> None:
        await self._calls.cancel_the_rest()
        await self._close_streams()
        if self._watcher is not None:
            watcher, self._watcher = self._watcher, None
            await watcher.close()
        if self._store is not None:
            store, self._store = self._store, None
            await store.close()

    @property
    def waiting(self) -> int:
        """How many `result()` calls wait now (their row read, the task not finished).
        They share one listener: a client holds its pool and at most one LISTEN
        connection, however many calls wait."""
        return self._watcher.waiting if self._watcher is not None else 0

    async def _finish_watcher(self) -> FinishWatcher:
        await self.store()
        assert self._watcher is not None
        return self._watcher

    # --- creating tasks --------------------------------------------------------------

    @tracked
    async def submit(
        self,
        prompt: str,
        *,
        model: str = DEFAULT_MODEL,
        queue: str = DEFAULT_QUEUE,
        id: str | None = None,
        interactive: bool = False,
        tools: Sequence[str] | None = None,
        config: str | Config | None = None,
        key: str | None = None,
        priority: int = DEFAULT_PRIORITY,
        **budget: Unpack[submissions.BudgetOptions],
    ) -> TaskHandle:
        """Create an agent task; `tools` default to every tool of the plugins its worker
        pins (no plugin starts here: `config` is kept for callers that pass it). `key`: its
        concurrency key (a tenant), `priority` 0-9 (higher first); `budget`: BudgetOptions."""
        item = Submission(prompt, model, queue, id, interactive, tools, key, priority, **budget)
        task = agent_task(item)
        await create_once(await self.store(), task)
        return TaskHandle(task.id, task.queue)

    @tracked
    async def submit_many(
        self,
        tasks: Iterable[Submission | str],
        *,
        model: str = DEFAULT_MODEL,
        queue: str = DEFAULT_QUEUE,
        config: str | Config | None = None,
        key: str | None = None,
        priority: int = DEFAULT_PRIORITY,
    ) -> list[TaskHandle]:
        """Create many agent tasks in one statement and one transaction, all or none.

        Each item is a prompt, or a `Submission` (whose unset fields take `model`,
        `queue`, `key` and `priority`). Every task is checked as `submit` checks it
        before anything is written; a bad one, or one whose id is taken, fails the whole
        batch with an error naming its index (from 0) and id.
        """
        batch = [
            with_batch_defaults(item, Submission("", model, queue, key=key, priority=priority))
            for item in tasks
        ]
        built = [in_batch(index, item) for index, item in enumerate(batch)]
        check_distinct_ids(built)
        await create_batch(await self.store(), built, "task")
        return [TaskHandle(task.id, task.queue) for task in built]

    @tracked
    async def enqueue(
        self,
        job: str,
        input: Mapping[str, object] | None = None,
        *,
        queue: str = DEFAULT_QUEUE,
        id: str | None = None,
        run_at: datetime | None = None,
        delay: float | None = None,
        key: str | None = None,
        priority: int = DEFAULT_PRIORITY,
        countdown: float | None = None,
        eta: datetime | None = None,
        unique_key: str | None = None,
        unique_for: float | None = None,
        debounce: float | None = None,
    ) -> TaskHandle:
        """Create a plain job: one call of the function decorated `@noeta.tool` as `job`
        (`key` and `priority` as for `submit`). It may start `delay` (or, as Celery says,
        `countdown`) seconds from now, or at `run_at` (`eta`): one of them at most. With
        `unique_key`: `unique_for` seconds during which an enqueue of the key returns this
        job's handle, writing nothing; or `debounce` seconds to wait, a later enqueue of
        the key replacing it (ADR-0093)."""
        tool = job_tasks.configured_job_tool(job, self._config)
        checked = job_tasks.job_input(tool, input)
        check_key("queue name", queue)
        given = (run_at or eta, delay if delay is not None else countdown)
        rule = unique_jobs.key_rule(job, unique_key, unique_for, debounce, start=given, id=id)
        start = await job_tasks.start_time(
            self.store, run_at=run_at, delay=delay, eta=eta, countdown=countdown
        )
        task = job_tasks.job_task(new_id(id), tool, checked, queue, start, key, priority)
        store = await self.store()
        return TaskHandle(await unique_jobs.create_job(store, task, unique_key, rule), queue)

    @tracked
    async def enqueue_many(
        self,
        job: str,
        inputs: Iterable[Mapping[str, object] | None],
        *,
        queue: str = DEFAULT_QUEUE,
        run_at: datetime | None = None,
        delay: float | None = None,
        key: str | None = None,
        priority: int = DEFAULT_PRIORITY,
        countdown: float | None = None,
        eta: datetime | None = None,
        unique_keys: Sequence[str] | None = None,
        unique_for: float | None = None,
        debounce: float | None = None,
    ) -> list[TaskHandle]:
        """Create one job per input in one statement and one transaction, all or none.

        Every input is checked against the function's schema first: a bad one fails the
        batch, named by its index (from 0), and nothing is written. Safe to call again
        with the same arguments only if it raised: a lost reply is resent by the client
        with the same ids, never making duplicates. `unique_keys` (one per input) with
        `unique_for` or `debounce`: each job as `enqueue` with its key, in order.
        """
        tool = job_tasks.configured_job_tool(job, self._config)
        start = await job_tasks.start_time(
            self.store, run_at=run_at, delay=delay, eta=eta, countdown=countdown
        )
        batch = job_tasks.job_batch(
            tool, inputs, queue=queue, start=start, key=key, priority=priority
        )
        given = (run_at or eta, delay if delay is not None else countdown)
        keys, rule = unique_jobs.batch_keys(
            job, unique_keys, len(batch), unique_for, debounce, start=given
        )
        holders = await unique_jobs.create_jobs(await self.store(), batch, keys, rule)
        return [TaskHandle(holder, queue) for holder in holders]

    @tracked
    async def fork(
        self,
        task: TaskRef,
        at: int,
        *,
        id: str | None = None,
        message: str | None = None,
        reply: str | Mapping[str, object] | None = None,
        model: str | None = None,
        queue: str | None = None,
        workspace: str = "fresh",
    ) -> TaskHandle:
        """A new task whose log is `task`'s through seq `at` plus one change: a new user
        `message` (where a turn ended), a `reply` replacing the model's at `at` (JSON, as
        `ModelReplied` stores it), or another `model` for the calls that follow. Nothing
        before `at` runs again. ForkRefused names the fork points near a seq that is not
        one (ADR-0091). `workspace`: "fresh" (empty) or "copy": the source's files as they
        are when the fork first runs, copied by its worker; files are not in the log, so
        not as they were at `at` (ADR-0096)."""
        from noeta.backends.models.registry import stored_spec
        from noeta.client import forking  # the fold: kept out of commands that need none

        forking.check_one_change(message, reply)
        change = forking.ForkChange(
            message=None if message is None else check_text("message", message),
            reply=None if reply is None else forking.parse_reply(_json_text(reply)),
            model=None if model is None else stored_spec(check_text("model spec", model)),
            workspace=workspace,
        )
        new = await forking.fork(
            await self.store(),
            check_key("task id", _id(task)),
            at,
            new_id=new_id(id),
            queue=None if queue is None else check_key("queue name", queue),
            change=change,
        )
        return TaskHandle(new.id, new.queue)

    # --- results ---------------------------------------------------------------------

    @tracked
    async def result(self, task: TaskRef, *, timeout: float | None = None) -> str:  # noqa: ASYNC109 (Celery's get(timeout=), the issue's API)
        """The task's answer once it is done (a job's: its result as JSON text).

        Raises TaskFailed or TaskCancelled as it ended, ResultTimeout after `timeout`
        seconds (None: wait as long as it takes), UnknownTask for an id no task has.
        """
        if timeout is not None and not timeout > 0:
            raise ConfigError(f"timeout must be more than 0 seconds (or None), not {timeout}")
        task_id = _id(task)
        watcher = await self._finish_watcher()
        record = await watcher.wait_finished(task_id, timeout)
        async with watcher.reads:  # the same bound as the waits' reads
            finished = await task_logs.finish_event(await self.store(), task_id)
        if record.status is TaskStatus.CANCELLED:
            raise TaskCancelled(task_id, finished.error if finished else "")
        if record.status is TaskStatus.FAILED:
            raise TaskFailed(task_id, finished.error if finished else "")
        return finished.answer if finished else ""

    async def job_result(self, task: TaskRef, *, timeout: float | None = None) -> JSONValue:  # noqa: ASYNC109
        """A job's result, the function's return value as it came back through JSON."""
        text = await self.result(task, timeout=timeout)
        try:
            value: JSONValue = json.loads(text)
        except ValueError:
            raise NoetaError(f"task {_id(task)} is not a job: its answer is not JSON") from None
        return value

    async def get(self, task: TaskRef) -> TaskRecord:
        """The task's row now (its status, queue, owner); UnknownTask if there is none."""
        return await task_logs.task_row(await self.store(), _id(task))

    async def usage(self, task: TaskRef) -> TaskUsage:
        """What the task cost so far, its subtasks' included: `.usage` (tokens), `.cost`
        (USD at the config's `prices:`; None, unknown, where a price or a reply's usage is
        missing), `.possibly_billed` (requests whose reply never came), `.costs` per model."""
        from noeta.client.task_costs import task_usage  # it folds logs: loaded when asked

        return await task_usage(await self.store(), _id(task), await self.prices())

    async def prices(self) -> Mapping[str, Price]:
        """USD per million tokens by model spec, as `usage()` prices: the bundled table
        with the config's `prices:` over it."""
        from noeta.config import Config, load_config

        config = self._config if isinstance(self._config, Config) else load_config(self._config)
        return config.prices

    async def tasks(
        self,
        *,
        status: TaskStatus | str | None = None,
        queue: str | None = None,
        parent: TaskRef | None = None,
        limit: int = 100,
    ) -> list[TaskRecord]:
        """Tasks newest first; with `parent`, that task's subtasks in launch order."""
        if queue is not None:
            check_key("queue name", queue)
        if limit < 1:
            raise ConfigError(f"limit must be at least 1, not {limit}")
        wanted = None if status is None else TaskStatus(status)
        store = await self.store()
        if parent is None:
            return await store.list_tasks(status=wanted, queue=queue, limit=limit)
        return [
            record
            for _, record in await self.children(parent)
            if (wanted is None or record.status == wanted)
            and (queue is None or record.queue == queue)
        ][:limit]

    async def children(self, task: TaskRef) -> list[tuple[str, TaskRecord]]:
        """The subtasks a task launched, from its log: (description, row), in launch order."""
        store = await self.store()
        task_id = check_key("task id", _id(task))
        await self.get(task_id)
        return await task_logs.launched_subtasks(store, task_id)

    async def tail(
        self, task: TaskRef, *, after: int = 0, follow: bool = True
    ) -> AsyncGenerator[TailedEvent, None]:
        """The task's events after seq `after`; following, new ones until it finishes."""
        store = await self.store()
        async for event in task_logs.tail(store, _id(task), after, follow):
            yield event

    # --- talking to a task -----------------------------------------------------------

    async def send(self, task: TaskRef, text: str, *, key: str | None = None) -> bool:
        """Send an interactive task a message; False if one with `key` was sent already."""
        return await messages.send(self.store, _id(task), text, key)

    async def cancel(self, task: TaskRef) -> bool:
        """Ask for the task to stop; False if that was asked already."""
        return await messages.cancel(self.store, _id(task))

    async def answer(self, task: TaskRef, call: str, decision: str, *, note: str = "") -> None:
        """Allow or deny the call a gate stopped the task to ask a person about."""
        messages.check_answer(call, decision, note)
        await messages.answer(self.store, _id(task), call, decision, note)


def _json_text(value: str | Mapping[str, object]) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _id(task: TaskRef) -> str:
    return check_text("task id", task.id if isinstance(task, TaskHandle) else task)
