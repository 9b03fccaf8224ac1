"""`Client`: the same calls as `AsyncClient`, for code without an event loop.

Its AsyncClient lives on an event loop in a thread of its own, so a `Client` also works
inside code that runs a loop already (a sync view called from async code).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import AsyncGenerator, Coroutine, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from noeta.client.async_client import (
    DEFAULT_MODEL,
    AsyncClient,
    Submission,
    TailedEvent,
    TaskHandle,
    TaskRef,
)
from noeta.core.payload import JSONValue
from noeta.core.queue_settings import QueueOverview, Rate
from noeta.core.store import DEFAULT_PRIORITY, DEFAULT_QUEUE, TaskRecord, TaskStatus

if TYPE_CHECKING:
    from noeta.config import Config

T = TypeVar("T")


class Client:
    def __init__(
        self,
        store: str | None = None,
        *,
        config: str | Config | None = None,
        application_name: str = "noeta-client",
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._client = self._run(_make(store, config, application_name))
        # A script that never calls close() (the Celery habit) still closes the store
        # and the loop: when the Client is collected, or at the latest at interpreter
        # exit, while the loop's thread still runs (else its pool's tasks are destroyed
        # pending, and say so on stderr).
        self._finalizer = weakref.finalize(
            self, _close_quietly, self._loop, self._thread, self._client
        )

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._finalizer.detach() is not None:
            _close(self._loop, self._thread, self._client)

    def submit(
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
    ) -> TaskHandle:
        return self._run(
            self._client.submit(
                prompt,
                model=model,
                queue=queue,
                id=id,
                interactive=interactive,
                tools=tools,
                config=config,
                key=key,
                priority=priority,
            )
        )

    def submit_many(
        self,
        tasks: Iterable[Submission | str],
        *,
        model: str = DEFAULT_MODEL,
        queue: str = DEFAULT_QUEUE,
        config: str | Config | None = None,
        key: str | None = None,
        priority: int = DEFAULT_PRIORITY,
    ) -> list[TaskHandle]:
        return self._run(
            self._client.submit_many(
                tasks, model=model, queue=queue, config=config, key=key, priority=priority
            )
        )

    def enqueue(
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
    ) -> TaskHandle:
        return self._run(
            self._client.enqueue(
                job,
                input,
                queue=queue,
                id=id,
                run_at=run_at,
                delay=delay,
                key=key,
                priority=priority,
            )
        )

    def set_queue(
        self,
        queue: str,
        *,
        concurrency: int | None = None,
        per_key: int | None = None,
        rate: str | Rate | None = None,
        paused: bool | None = None,
    ) -> QueueOverview:
        change = self._client.set_queue(
            queue, concurrency=concurrency, per_key=per_key, rate=rate, paused=paused
        )
        return self._run(change)

    def clear_queue(self, queue: str) -> bool:
        return self._run(self._client.clear_queue(queue))

    def queues(self, *names: str) -> list[QueueOverview]:
        return self._run(self._client.queues(*names))

    def result(self, task: TaskRef, *, timeout: float | None = None) -> str:
        return self._run(self._client.result(task, timeout=timeout))

    def job_result(self, task: TaskRef, *, timeout: float | None = None) -> JSONValue:
        return self._run(self._client.job_result(task, timeout=timeout))

    def get(self, task: TaskRef) -> TaskRecord:
        return self._run(self._client.get(task))

    def tasks(
        self,
        *,
        status: TaskStatus | str | None = None,
        queue: str | None = None,
        parent: TaskRef | None = None,
        limit: int = 100,
    ) -> list[TaskRecord]:
        return self._run(self._client.tasks(status=status, queue=queue, parent=parent, limit=limit))

    def tail(self, task: TaskRef, *, after: int = 0, follow: bool = True) -> Iterator[TailedEvent]:
        events = self._client.tail(task, after=after, follow=follow)
        try:
            while True:
                try:
                    yield self._run(_next(events))
                except StopAsyncIteration:
                    return
        finally:
            self._run(events.aclose())

    def send(self, task: TaskRef, text: str, *, key: str | None = None) -> bool:
        return self._run(self._client.send(task, text, key=key))

    def cancel(self, task: TaskRef) -> bool:
        return self._run(self._client.cancel(task))

    def answer(self, task: TaskRef, call: str, decision: str, *, note: str = "") -> None:
        self._run(self._client.answer(task, call, decision, note=note))


async def _next(events: AsyncGenerator[TailedEvent, None]) -> TailedEvent:
    return await anext(events)


def _close(loop: asyncio.AbstractEventLoop, thread: threading.Thread, client: AsyncClient) -> None:
    """Close the client on its loop, then stop the loop and its thread."""
    try:
        asyncio.run_coroutine_threadsafe(client.close(), loop).result()
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


def _close_quietly(
    loop: asyncio.AbstractEventLoop, thread: threading.Thread, client: AsyncClient
) -> None:
    """`_close` for a Client nobody closed: a failure to close is nobody's to handle (the
    server drops a gone process's connections anyway)."""
    with contextlib.suppress(Exception):
        _close(loop, thread, client)


async def _make(store: str | None, config: str | Config | None, name: str) -> AsyncClient:
    return AsyncClient(store, config=config, application_name=name)  # its lock, on its loop
