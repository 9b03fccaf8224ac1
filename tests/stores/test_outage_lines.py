"""A process whose PostgreSQL stops taking connections is told why, says so once, and says
once when it connects again; psycopg_pool's warning for each failed attempt of each of its
pools is not written beside it (ADR-0156)."""

from __future__ import annotations

import asyncio
import inspect
import logging

import psycopg_pool.pool_async
import pytest

from noeta.backends.stores.embedded import EmbeddedPostgres
from noeta.backends.stores.postgres import PostgresStore
from noeta.backends.stores.postgres.outages import POOL_CONNECT_FAILED
from noeta.core.errors import StoreError, StoreUnreachable
from noeta.testing.store_contract import created
from tests.worker.conftest import private_server, until

__all__ = ["private_server"]


def _messages(caplog: pytest.LogCaptureFixture, logger: str, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger and text in r.msg]


async def test_an_outage_is_one_line_with_its_reason_and_one_more_when_it_ends(
    private_server: EmbeddedPostgres, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    store = await PostgresStore.open(private_server.start(), migrate=True, deadline_seconds=2)
    try:
        await store.create_task(created("t"))
        await asyncio.to_thread(private_server.stop, mode="fast")
        for _ in range(2):  # a second call in the same outage adds no line
            with pytest.raises(StoreUnreachable) as raised:
                await store.get_task("t")
            # The reason libpq gave, not "the pool is full: all were in use".
            assert "refused" in str(raised.value).lower()
            assert "is full" not in str(raised.value)
        await asyncio.to_thread(private_server.start)

        async def answers() -> bool:
            try:
                return await store.get_task("t") is not None
            except StoreError:
                return False

        await until(answers, "the store answers again")
    finally:
        await store.close()
    (outage,) = _messages(caplog, "noeta.store", "cannot connect")
    assert store.where in outage and "refused" in outage.lower()
    assert len(_messages(caplog, "noeta.store", "connected again")) == 1
    assert not _messages(caplog, "psycopg.pool", "error connecting")


def test_an_applications_own_pools_keep_psycopg_pools_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pool_logger = logging.getLogger("psycopg.pool")
    pool_logger.warning(POOL_CONNECT_FAILED, "orders-db", "connection refused")
    pool_logger.warning(POOL_CONNECT_FAILED, "noeta:127.0.0.1:5432/noeta", "connection refused")
    assert _messages(caplog, "psycopg.pool", "error connecting") == [
        "error connecting in 'orders-db': connection refused"
    ]


def test_psycopg_pool_still_writes_the_warning_this_replaces() -> None:
    # If an upgrade changes its text, the filter no longer matches and the flood is back.
    assert f'logger.warning("{POOL_CONNECT_FAILED}"' in inspect.getsource(psycopg_pool.pool_async)


async def test_after_a_long_outage_the_first_statement_finds_a_connection(
    private_server: EmbeddedPostgres,
) -> None:
    # psycopg_pool tried to replace a lost connection after 1 s, 2 s, 4 s, ... for 5
    # minutes: after a 70 s outage its next try came 44 s after the server was back, and
    # every statement until then waited out its deadline (ADR-0156).
    # Every connection opened, as a worker's pools are: none to grow by, whose first try
    # would come at once.
    store = await PostgresStore.open(
        private_server.start(),
        migrate=True,
        deadline_seconds=4,
        max_connections=2,
        min_connections=2,
    )
    try:
        await store.create_task(created("t"))
        await asyncio.to_thread(private_server.stop, mode="fast")
        with pytest.raises(StoreUnreachable):
            await store.get_task("t")

        async def long_out() -> bool:  # tries enough that a doubling wait outgrows 4 s
            return store._pool.get_stats().get("connections_errors", 0) >= 8

        await until(long_out, "the pool has tried eight times", within=120)
        await asyncio.to_thread(private_server.start)
        assert await store.get_task("t") is not None  # within its 4 s deadline
    finally:
        await store.close()
