"""`Client`: `AsyncClient` for code without an event loop, derived from it method by method.

Its AsyncClient lives on an event loop in a thread of its own, so a `Client` also works
inside code that runs a loop already (a sync view called from async code).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import weakref
from collections.abc import AsyncGenerator, Callable, Coroutine, Iterator
from dataclasses import replace
from types import TracebackType
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from noeta.client.async_client import AsyncClient, TaskRef
from noeta.client.handles import TaskHandle
from noeta.client.stream_items import StreamItem
from noeta.client.task_logs import TailedEvent
from noeta.core.ports.reply_streams import Cursor

if TYPE_CHECKING:
    from noeta.config import Config

P = ParamSpec("P")
T = TypeVar("T")
Item = TypeVar("Item")


def _blocking(
    method: Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[Client, P], T]:
    """`method` run to its end on the Client's loop: its parameters, types and docstring
    (mypy and `inspect.signature` see the async method's), returning what it returns."""

    def blocking(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._run(method(self._client, *args, **kwargs))

    functools.update_wrapper(blocking, method)  # __wrapped__: inspect.signature follows it
    blocking.__qualname__ = f"Client.{method.__name__}"
    return blocking


def _made_one(
    method: Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, TaskHandle]],
) -> Callable[Concatenate[Client, P], TaskHandle]:
    """`_blocking`, the handle it returns able to `get()` its result through this Client."""

    def made(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> TaskHandle:
        return replace(self._run(method(self._client, *args, **kwargs)), results=self)

    functools.update_wrapper(made, method)
    made.__qualname__ = f"Client.{method.__name__}"
    return made


def _made_many(
    method: Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, list[TaskHandle]]],
) -> Callable[Concatenate[Client, P], list[TaskHandle]]:
    """`_made_one` for a batch."""

    def made(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> list[TaskHandle]:
        handles = self._run(method(self._client, *args, **kwargs))
        return [replace(handle, results=self) for handle in handles]

    functools.update_wrapper(made, method)
    made.__qualname__ = f"Client.{method.__name__}"
    return made


class Client:
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
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        made = _make(store, config, application_name, start_embedded, max_connections, session_url)
        self._client = self._run(made)
        # A script that never calls close() (the Celery habit) still closes the store
        # and the loop: when the Client is collected, or at the latest at interpreter
        # exit, while the loop's thread still runs (else its pool's tasks are destroyed
        # pending, and say so on stderr).
        self._finalizer = weakref.finalize(
            self, _close_quietly, self._loop, self._thread, self._client
        )

    def _iterate(self, items: AsyncGenerator[Item, None]) -> Iterator[Item]:
        """An async generator of the client's, drawn one item at a time on its loop, and
        closed there however the caller stops."""
        try:
            while True:
                try:
                    yield self._run(_next(items))
                except StopAsyncIteration:
                    return
        finally:
            self._run(items.aclose())

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

    @property
    def waiting(self) -> int:
        return self._client.waiting

    waiting.__doc__ = AsyncClient.waiting.__doc__

    # Every other call is the AsyncClient's, awaited on the loop (tests/client/
    # test_one_client.py checks no public method is left out).
    submit = _made_one(AsyncClient.submit)
    submit_many = _made_many(AsyncClient.submit_many)
    enqueue = _made_one(AsyncClient.enqueue)
    fork = _made_one(AsyncClient.fork)
    enqueue_many = _made_many(AsyncClient.enqueue_many)
    set_queue = _blocking(AsyncClient.set_queue)
    clear_queue = _blocking(AsyncClient.clear_queue)
    queues = _blocking(AsyncClient.queues)
    result = _blocking(AsyncClient.result)
    job_result = _blocking(AsyncClient.job_result)
    get = _blocking(AsyncClient.get)
    usage = _blocking(AsyncClient.usage)
    prices = _blocking(AsyncClient.prices)
    tasks = _blocking(AsyncClient.tasks)
    children = _blocking(AsyncClient.children)
    send = _blocking(AsyncClient.send)
    cancel = _blocking(AsyncClient.cancel)
    answer = _blocking(AsyncClient.answer)
    retry = _made_one(AsyncClient.retry)
    canvas = _made_one(AsyncClient.canvas)
    retry_many = _blocking(AsyncClient.retry_many)
    cancel_many = _blocking(AsyncClient.cancel_many)
    prune_many = _blocking(AsyncClient.prune_many)

    def tail(self, task: TaskRef, *, after: int = 0, follow: bool = True) -> Iterator[TailedEvent]:
        yield from self._iterate(self._client.tail(task, after=after, follow=follow))

    tail.__doc__ = AsyncClient.tail.__doc__

    def stream(
        self, task: str | TaskHandle, *, after: Cursor | str | None = None
    ) -> Iterator[StreamItem]:
        yield from self._iterate(self._client.stream(task, after=after))

    stream.__doc__ = AsyncClient.stream.__doc__


async def _next(items: AsyncGenerator[Item, None]) -> Item:
    return await anext(items)


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


async def _make(
    store: str | None,
    config: str | Config | None,
    name: str,
    start_embedded: bool,
    max_connections: int,
    session_url: str | None,
) -> AsyncClient:
    # Made on its loop: its lock belongs to that loop.
    return AsyncClient(
        store,
        config=config,
        application_name=name,
        start_embedded=start_embedded,
        max_connections=max_connections,
        session_url=session_url,
    )
