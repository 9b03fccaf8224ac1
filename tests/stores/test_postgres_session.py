"""The server-side limits every pooled session sets: read back with SHOW from the store's
own sessions, with the defaults derived from the client deadline, and a URL's own
`options` winning over them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from noeta.backends.stores.postgres import PostgresStore, migrate_database
from noeta.backends.stores.postgres.schema import MIGRATION_LOCK
from noeta.backends.stores.postgres.session import server_keepalives as server_keepalives_of
from noeta.core.errors import ConfigError

T = TypeVar("T")

LIMITS = (
    "statement_timeout",
    "lock_timeout",
    "idle_in_transaction_session_timeout",
    "client_connection_check_interval",
)


async def _shown(store: PostgresStore) -> dict[str, Any]:
    shown = {}
    async with store._pool.connection() as connection:
        for name in LIMITS:
            cursor = await connection.execute(f"SHOW {name}")
            row = await cursor.fetchone()
            assert row is not None
            shown[name] = row[0]
        shown["version"] = connection.info.server_version
    return shown


async def test_sessions_have_limits_that_fit_the_deadline_and_the_lease(
    postgres_url: str,
) -> None:
    store = await PostgresStore.open(postgres_url, migrate=True)
    try:
        shown = await _shown(store)
    finally:
        await store.close()
    assert shown["statement_timeout"] == "30s"  # 3 client deadlines
    assert shown["lock_timeout"] == "15s"
    assert shown["idle_in_transaction_session_timeout"] == "30s"  # one default lease
    assert shown["version"] >= 140000  # the test server has the setting
    assert shown["client_connection_check_interval"] == "5s"


async def test_the_urls_own_options_win(postgres_url: str) -> None:
    own = conninfo_to_dict(postgres_url).get("options") or ""
    options = f"{own} -c statement_timeout=90s -c lock_timeout=0"
    store = await PostgresStore.open(
        make_conninfo(postgres_url, options=options), migrate=True, deadline_seconds=2
    )
    try:
        shown = await _shown(store)
    finally:
        await store.close()
    assert shown["statement_timeout"] == "90s"
    assert shown["lock_timeout"] == "0"
    assert shown["client_connection_check_interval"] == "1s"  # half the 2 s deadline


async def test_an_unparseable_url_is_a_config_error_without_its_password() -> None:
    url = "postgresql://noeta:s3cret-pw@127.0.0.1:1/noeta options='-c statement_timeout=1s'"
    with pytest.raises(ConfigError, match="percent-encode") as raised:
        await PostgresStore.open(url)
    assert "s3cret-pw" not in str(raised.value)


def kernel_keepalives(connection: Any) -> tuple[int, int, int, int]:
    """What the kernel will do for this connection's socket when it sits idle: probe or
    not, after how many seconds, how often, how many unanswered before it resets it."""
    probe = socket.socket(fileno=os.dup(connection.pgconn.socket))
    try:
        return (
            probe.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            probe.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
            probe.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
            probe.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
        )
    finally:
        os.close(probe.detach())


@contextlib.asynccontextmanager
async def each_kind_of_connection(store: PostgresStore) -> AsyncIterator[list[Any]]:
    """A pooled connection of `store`, a LISTEN's and a session of its own."""
    async with store._pool.connection() as pooled:
        listening = await store._listening_connection("test-keepalives")
        session = await store._session_connection("test-keepalives")
        try:
            yield [pooled, listening, session]
        finally:
            await listening.close()
            await session.close()


async def test_every_connection_probes_an_idle_peer_every_minute(postgres_url: str) -> None:
    # ADR-0129: a quiet worker's idle sessions (ADR-0127) keep a firewall's state alive,
    # and a vanished peer is found in about 90 s, not two hours (libpq's default).
    store = await PostgresStore.open(postgres_url, migrate=True)
    try:
        async with each_kind_of_connection(store) as connections:
            assert [kernel_keepalives(each) for each in connections] == [(1, 60, 10, 3)] * 3
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("own", "kept"),
    [({"keepalives_idle": "5"}, (1, 5)), ({"keepalives": "0"}, (0,))],
    ids=["its own idle time", "keepalives off"],
)
async def test_a_urls_own_keepalives_are_left_whole(
    postgres_url: str, own: dict[str, str], kept: tuple[int, ...]
) -> None:
    store = await PostgresStore.open(make_conninfo(postgres_url, **own), migrate=True)
    try:
        async with store._pool.connection() as pooled:
            shown = kernel_keepalives(pooled)
    finally:
        await store.close()
    assert shown[: len(kept)] == kept
    if kept == (1, 5):
        assert shown[2:] != (10, 3)  # the kernel's own interval and count, not noeta's


SERVER_PROBES = ("tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count")


async def server_keepalives(connection: Any) -> tuple[str, ...]:
    """What the server's kernel will do for this session's socket: when it sits idle (the
    kernel's own values where none was set, as the server reads them back), and how long
    data it sent may go unacknowledged (0: the kernel's retransmissions, some 15 minutes)."""
    shown = []
    for name in (*SERVER_PROBES, "tcp_user_timeout"):
        row = await (await connection.execute(f"SHOW {name}")).fetchone()
        shown.append(row[0])
    return tuple(shown)


@pytest.mark.parametrize(
    ("own", "probes"),
    [
        ({}, ("60", "10", "3", "90000")),  # milliseconds, as the server shows them
        ({"keepalives_idle": "5"}, ("5", "75", "9", "0")),
        ({"keepalives": "0"}, ("7200", "75", "9", "0")),
    ],
    ids=["noeta's", "the URL's idle time", "keepalives off"],
)
async def test_the_server_probes_each_session_as_its_client_does(
    postgres_url: str, own: dict[str, str], probes: tuple[str, ...]
) -> None:
    # ADR-0154: a path that forgot a connection drops the client's reset as well; the
    # server finds its idle backend gone when its own probes go unanswered.
    store = await PostgresStore.open(make_conninfo(postgres_url, **own), migrate=True)
    try:
        async with each_kind_of_connection(store) as connections:
            shown = [await server_keepalives(each) for each in connections]
    finally:
        await store.close()
    assert set(shown) == {probes}, shown


def test_the_server_gives_up_on_unacknowledged_data_after_the_probes_whole_time() -> None:
    url = "postgresql://noeta@db/noeta?keepalives_idle=30&keepalives_interval=5&keepalives_count=4"
    assert server_keepalives_of(url, 180000) == {
        "tcp_keepalives_idle": "30",
        "tcp_keepalives_interval": "5",
        "tcp_keepalives_count": "4",
        "tcp_user_timeout": "50000",  # 30 + 4 x 5 s, in milliseconds
    }
    assert "tcp_user_timeout" not in server_keepalives_of(url, 110000)  # none before 12


async def test_a_migration_waiting_on_its_lock_is_probed_by_the_server(
    empty_postgres_url: str,
) -> None:
    # ADR-0154 for `noeta db migrate`: its locks (DDL's among them) stop every worker, so a
    # path that forgets it must free them in about 90 s, not the server kernel's two hours.
    timer, applied = await probed_while_waiting(
        empty_postgres_url,
        MIGRATION_LOCK,
        lambda: migrate_database(empty_postgres_url, application_name="test-probes"),
    )
    assert timer <= 60
    assert applied  # it went on to migrate, once the lock was free


async def probed_while_waiting(
    url: str, lock: str, start: Callable[[], Awaitable[T]]
) -> tuple[float, T]:
    """`start()`, whose session (application_name "test-probes") waits on `lock` held by
    another: the server kernel's keepalive timer on that session's socket, seen from
    outside while it waits, and what `start()` returned once the lock was free."""
    connect = psycopg.AsyncConnection.connect
    async with (
        await connect(url) as holder,
        await connect(url, autocommit=True) as watcher,
    ):
        await holder.execute(lock)  # held until this transaction ends
        started = asyncio.ensure_future(start())
        try:
            timer = keepalive_timer_seconds(await until_waiting_on_a_lock(watcher, "test-probes"))
        finally:
            await holder.rollback()
            result = await started
    return timer, result


async def until_waiting_on_a_lock(connection: Any, application: str, within: float = 30) -> int:
    """The backend pid of the session named `application` once it waits on a lock
    (polling the server, not a sleep standing in for synchronisation). `connection` is
    in autocommit: a transaction would see one snapshot of pg_stat_activity."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        cursor = await connection.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
            " AND wait_event_type = 'Lock'",
            (application,),
        )
        row = await cursor.fetchone()
        if row is not None:
            return int(row[0])
        assert loop.time() < deadline, f"{application} never waited on a lock"
        await asyncio.sleep(0.05)


def keepalive_timer_seconds(pid: int) -> float:
    """Seconds until the server kernel's next keepalive probe on `pid`'s socket (`ss`)."""
    shown = subprocess.run(
        ["ss", "-tnopH", "state", "established"],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    line = next(line for line in shown.splitlines() if f"pid={pid}," in line)
    found = re.search(r"timer:\(keepalive,(?:(\d+)min)?(?:(\d+)(?:\.\d+)?sec)?,", line)
    assert found is not None, line
    minutes, seconds = (int(part or 0) for part in found.groups())
    return minutes * 60 + seconds


async def test_a_schema_check_waiting_on_a_lock_is_probed_by_the_server(
    postgres_url: str,
) -> None:
    # ADR-0154 for the check every store makes as it opens: a worker restarting in a loop
    # behind a path that forgets would leave one backend a start, each for two hours.
    timer, store = await probed_while_waiting(
        postgres_url,
        "LOCK TABLE noeta_migrations IN ACCESS EXCLUSIVE MODE",
        lambda: PostgresStore.open(postgres_url, application_name="test-probes"),
    )
    await store.close()
    assert timer <= 60
