"""Readiness: whether this process should be given work now. Not while it drains (a
stopping worker says so before it stops claiming); not while its store does not answer
or its schema is not this noeta's. The store is asked only when someone asks, on a
connection of its own, within a timeout; answers are kept briefly so probes share one."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable

from noeta.core.errors import NoetaError

CHECK_SECONDS = 5.0  # the store's answer, connection included
KEEP_SECONDS = 1.0  # probes within this share one check

StoreCheck = Callable[[float], Awaitable[None]]


def store_check(url: str | None) -> StoreCheck:
    """The store at `url` answers and its schema is current (raises otherwise)."""

    async def check(timeout_seconds: float) -> None:
        from noeta.backends.stores.readiness import check_store_ready

        await check_store_ready(url, timeout_seconds)

    return check


class Readiness:
    def __init__(
        self,
        check: StoreCheck | None,
        *,
        timeout_seconds: float = CHECK_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.check = check
        self.timeout_seconds = timeout_seconds
        self.monotonic = monotonic
        self._draining = threading.Event()
        self._starting = threading.Event()  # set while the process waits for its store
        self._lock = threading.Lock()
        self._kept: tuple[float, list[str]] | None = None

    def drain(self) -> None:
        """The process is stopping: not ready from now on, whatever the store says."""
        self._draining.set()

    @property
    def draining(self) -> bool:
        return self._draining.is_set()

    def starting(self, waiting: bool) -> None:
        """The process waits for its store before it takes work (ADR-0157): not ready."""
        if waiting:
            self._starting.set()
        else:
            self._starting.clear()

    def reasons(self) -> list[str]:
        """Why this process is not ready ([]: it is). Blocks: call it off the event loop."""
        if self._draining.is_set():
            return ["draining: the process is stopping"]
        if self._starting.is_set():
            return ["starting: the process has not opened its store yet"]
        with self._lock:  # concurrent probes wait for one check instead of each making one
            now = self.monotonic()
            if self._kept is not None and now - self._kept[0] < KEEP_SECONDS:
                return self._kept[1]
            found = self._store_reasons()
            self._kept = (self.monotonic(), found)
            return found

    def _store_reasons(self) -> list[str]:
        if self.check is None:
            return []
        limit = self.timeout_seconds
        try:
            asyncio.run(asyncio.wait_for(self.check(limit), limit))
        except TimeoutError:
            return [f"store: no answer within {limit:g} s"]
        except NoetaError as error:
            return [f"store: {error}"]
        except OSError as error:
            return [f"store: {error.strerror or type(error).__name__}"]
        return []
