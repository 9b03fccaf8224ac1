"""One process's health: its loops (liveness), whether it should get work (readiness),
and, when `--health` names an address, the server that answers for both and /metrics."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Awaitable, Callable

from noeta.health.liveness import DEFAULT_STUCK_AFTER, Liveness
from noeta.health.readiness import Readiness, store_check
from noeta.health.server import HealthServer

log = logging.getLogger("noeta.health")

SCRAPE_STORE_SECONDS = 2.0  # a scrape's store readings: a store down costs this, once
SCRAPE_KEEP_SECONDS = 5.0  # scrapes within this share one reading

Refresh = Callable[[], Awaitable[None]]


class ProcessHealth:
    """Made before the process starts (a taken address fails it first); `start` on its
    event loop, `close` when it ends."""

    def __init__(
        self,
        listening: socket.socket | None,
        store_url: str | None,
        stuck_after: float = DEFAULT_STUCK_AFTER,
    ) -> None:
        self.listening = listening
        self.liveness = Liveness(stuck_after)
        self.readiness = Readiness(store_check(store_url))
        self._server: HealthServer | None = None
        self._beating: asyncio.Task[None] | None = None
        self._refresh: Refresh | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._refreshed_at = float("-inf")
        self._refreshing = threading.Lock()

    def start(self, refresh: Refresh | None = None) -> None:
        """Serve, if an address was given; `refresh` takes the store readings a scrape
        shows (queue and limit gauges), run on this event loop when a scrape asks."""
        if self.listening is None:
            return
        self._loop = asyncio.get_running_loop()
        self._refresh = refresh
        self._beating = asyncio.create_task(self.liveness.beat_event_loop(), name="noeta-beat")
        self._server = HealthServer(self.listening, self.liveness, self.readiness, self._scrape)
        self._server.start()
        log.info("health: serving /livez, /readyz and /metrics on %s", self.address)

    def read_gauges_with(self, refresh: Refresh) -> None:
        """`refresh` takes the store readings a scrape shows from now on (a process that
        waited for its store serves before it has one, ADR-0157)."""
        with self._refreshing:
            self._refresh, self._refreshed_at = refresh, float("-inf")

    def _scrape(self) -> tuple[bytes, str]:
        """The metrics text: the store readings first, if due, bounded; a store that does
        not answer leaves the last ones, and the process's own metrics are served."""
        with self._refreshing:
            due = time.monotonic() - self._refreshed_at >= SCRAPE_KEEP_SECONDS
            if due and self._refresh is not None and self._loop is not None:
                self._refreshed_at = time.monotonic()
                future = asyncio.run_coroutine_threadsafe(_awaited(self._refresh), self._loop)
                try:
                    future.result(SCRAPE_STORE_SECONDS)
                except concurrent.futures.TimeoutError:
                    future.cancel()
                    log.debug("metrics: the store readings took over %g s", SCRAPE_STORE_SECONDS)
                except Exception as error:  # a store down: its own metrics still go out
                    log.debug("metrics: store readings failed: %s", error)
        from noeta.observability import prometheus

        return prometheus.render()

    @property
    def address(self) -> str:
        """HOST:PORT the health server listens on ("" when off)."""
        return "" if self.listening is None else _shown(self.listening)

    async def close(self) -> None:
        if self._beating is not None:
            self._beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._beating
        if self._server is not None:
            await asyncio.to_thread(self._server.close)
        elif self.listening is not None:
            self.listening.close()


async def _awaited(refresh: Refresh) -> None:
    await refresh()


def _shown(listening: socket.socket) -> str:
    host, port = listening.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
