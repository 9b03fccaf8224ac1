"""`noeta web --replica`: the streaming standby the pages read from, and how far behind
the primary it is (replayed WAL, received WAL, the last replayed commit), asked once per
page on a connection of its own with a short timeout, so a stopped replica is one line."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg

from noeta.backends.stores.postgres.connection import describe
from noeta.backends.stores.postgres.session import (
    server_keepalives,
    startup_options,
    with_keepalives,
)
from noeta.client import AsyncClient
from noeta.core.errors import ConfigError, StoreError, StoreUnavailable

# A replica that takes longer than this to answer the lag query is "not answering": the
# page says so at once instead of waiting the store's deadline on every read.
PROBE_SECONDS = 3.0
APPLICATION_NAME = "noeta-web-replica"

_LAG = """
SELECT pg_is_in_recovery(),
       now() - pg_last_xact_replay_timestamp(),
       pg_wal_lsn_diff(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()),
       pg_last_wal_receive_lsn() IS NULL
"""


@dataclass(frozen=True)
class ReplicaState:
    """The standby's own account of its lag."""

    where: str  # host:port/dbname, never the password
    in_recovery: bool  # false: it is a primary (given by mistake, or promoted since)
    since_replay: timedelta | None  # since the last replayed commit's time on the primary
    unreplayed_bytes: int | None  # WAL received but not yet replayed
    streaming: bool  # whether it has received WAL by streaming at all

    def line(self) -> str:
        """One line for the page's status line."""
        if not self.in_recovery:
            return f"replica {self.where} is not in recovery: it is a primary now"
        if not self.streaming:
            return f"replica {self.where}: receives no WAL by streaming{self._last_commit()}"
        if self.unreplayed_bytes == 0:
            # Caught up: the time since the last commit is the primary's quiet, not lag.
            return f"replica {self.where}: caught up (all received WAL replayed)"
        return (
            f"replica {self.where}: {self.unreplayed_bytes:,} bytes of WAL received, "
            f"not yet replayed{self._last_commit()}"
        )

    def _last_commit(self) -> str:
        if self.since_replay is None:
            return "; nothing replayed yet"
        seconds = max(0.0, self.since_replay.total_seconds())
        return f"; replay lag {seconds:.1f} s (last replayed commit)"


class ReadReplica:
    """The replica's client (the pages' reads) and its lag, asked on a connection kept
    for it (one round trip per page)."""

    def __init__(self, url: str, *, probe_seconds: float = PROBE_SECONDS) -> None:
        self.where = describe(url)
        self._url, self._probe_seconds = url, probe_seconds
        self.client = self._new_client()
        self._connection: psycopg.AsyncConnection[Any] | None = None
        self._lost = False  # the probe's connection broke: so did the pages' pool's
        self._asking: asyncio.Future[ReplicaState] | None = None

    def _new_client(self) -> AsyncClient:
        # Its own session URL: NOETA_STORE_SESSION names the primary's, never this one's.
        return AsyncClient(
            self._url, application_name="noeta-web", start_embedded=False, session_url=self._url
        )

    async def open(self) -> ReplicaState:
        """Open the reads' store and check this is a standby: at start, before serving."""
        try:
            await self.client.store()
            state = await self.state()
        except ReplicaAway as away:
            raise StoreUnavailable(str(away)) from None
        except StoreError as error:  # unreachable, a schema not this code's, …
            raise StoreUnavailable(f"the read replica (--replica): {error}") from None
        if not state.in_recovery:
            raise ConfigError(
                f"--replica {self.where} is not a replica: pg_is_in_recovery() is false "
                "there (a primary); give a streaming standby's URL"
            )
        return state

    async def state(self) -> ReplicaState:
        """The replica's lag now; ReplicaAway if it does not answer within the bound.
        Pages asking at once share one question: a frozen replica holds each of them
        one bound, not one bound per page before it."""
        if self._asking is None or self._asking.done():
            self._asking = asyncio.ensure_future(self._asked())
        return await asyncio.shield(self._asking)

    async def _asked(self) -> ReplicaState:
        kept = self._connection is not None
        try:
            state = await self._ask_within_bound()
        except ReplicaAway as away:
            if not (kept and isinstance(away.__cause__, psycopg.OperationalError)):
                raise
            state = await self._ask_within_bound()  # a kept connection a restart ended
        if self._lost:
            await self._reopen()
        return state

    async def _ask_within_bound(self) -> ReplicaState:
        try:
            async with asyncio.timeout(self._probe_seconds):
                return await self._ask()
        except (psycopg.Error, TimeoutError) as error:
            await self._drop()
            raise ReplicaAway(self.where, error) from error

    async def _reopen(self) -> None:
        """The replica went away (a restart, a stop) and answers again: the pool's
        connections died with it, so the pages read through a new pool; without this
        the first page after every restart failed with "lost the connection"."""
        self._lost = False
        old, self.client = self.client, self._new_client()
        await old.close()

    async def _ask(self) -> ReplicaState:
        if self._connection is None:
            url = with_keepalives(self._url)  # idle between pages: ADR-0129's probes
            self._connection = await psycopg.AsyncConnection.connect(
                url,
                autocommit=True,
                application_name=APPLICATION_NAME,
                connect_timeout=max(1, round(self._probe_seconds)),
                # The replica probes it too (ADR-0154). The URL takes startup options:
                # the pages' store, whose session URL it is, sends its limits there.
                options=startup_options(url, server_keepalives(url, 0)),
            )
        cursor = await self._connection.execute(_LAG)
        row = await cursor.fetchone()
        assert row is not None
        in_recovery, since, unreplayed, no_stream = row
        behind = None if unreplayed is None else int(unreplayed)
        return ReplicaState(self.where, bool(in_recovery), since, behind, not no_stream)

    async def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            self._lost = True
            with contextlib.suppress(Exception):
                await connection.close()

    async def close(self) -> None:
        if self._asking is not None and not self._asking.done():
            self._asking.cancel()
        await self._drop()
        await self.client.close()


class ReplicaAway(StoreUnavailable):
    """The replica did not answer: the page says so; actions still go to the primary."""

    def __init__(self, where: str, error: BaseException) -> None:
        why = "no answer in time" if isinstance(error, TimeoutError) else _first_line(error)
        super().__init__(
            f"the read replica {where} is not answering ({why}): the pages read only from "
            "it; actions still go to the primary"
        )


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
