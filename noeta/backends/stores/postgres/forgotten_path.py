"""A statement that got no answer within its deadline is evidence about the network path,
not only about its connection (ADR-0152).

A firewall, a NAT or a failover that moves the server's address forgets every connection
open through it at once; their packets vanish while new connections pass. Keepalives reset
a forgotten idle connection only after about 90 s (ADR-0129), and a pool's look at an idle
socket sees nothing wrong (ADR-0148): until then each forgotten connection a process
reaches for costs one more deadline. So when one deadline passes, the store replaces what
it would reach for next: every idle connection of its pools (psycopg_pool's `drain()`:
the idle ones closed and opened again, the ones out closed when given back), and every
LISTEN connection, whose socket is shut so that its listener reconnects and says it
listens again ("*"), as after any lost connection.

At most once a deadline: a server that is merely slow (deadlines met under overload, a
statement blocked on a lock) loses its sessions' warmth once a deadline at most, never a
storm of reconnects. Nothing here runs unless a deadline passed.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from noeta.backends.stores.postgres.round_trip import shut_socket

log = logging.getLogger(__name__)


class ForgottenPath:
    """One store's connections to one server: replaced together when a deadline passes."""

    def __init__(
        self,
        where: str,
        deadline_seconds: float,
        pools: Callable[[], Iterable[AsyncConnectionPool[Any] | None]],
    ) -> None:
        self._where = where
        self._deadline_seconds = deadline_seconds
        self._pools = pools  # the store's pools as they are now (the claims' opens late)
        self._listening: set[psycopg.AsyncConnection[Any]] = set()
        self._replaced_at = -float("inf")

    @contextlib.contextmanager
    def listening(self, connection: psycopg.AsyncConnection[Any]) -> Iterator[None]:
        """A LISTEN connection, replaced with the rest while it is open."""
        self._listening.add(connection)
        try:
            yield
        finally:
            self._listening.discard(connection)

    async def no_answer(self) -> None:
        """A statement's deadline passed: replace the store's idle and listening
        connections, unless that was done less than a deadline ago."""
        now = time.monotonic()
        if now - self._replaced_at < self._deadline_seconds:
            return
        self._replaced_at = now
        log.warning(
            "store: a statement to PostgreSQL at %s got no answer within %g s; replacing "
            "this process's idle and listening connections to it (a firewall or a NAT may "
            "have forgotten them all)",
            self._where,
            self._deadline_seconds,
        )
        for connection in list(self._listening):
            shut_socket(connection)  # its listener's read fails now: it listens again
        for pool in self._pools():
            if pool is not None and not pool.closed:
                await pool.drain()
