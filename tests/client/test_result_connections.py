"""Waiting for results costs a client one LISTEN connection, however many calls wait:
500 `result()` calls at once hold at most 2 connections beyond the client's own (counted
by the server, in pg_stat_activity), and every result arrives."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import psycopg
import pytest

from noeta.backends.stores import open_store
from noeta.client import AsyncClient
from noeta.core.errors import UnknownTask
from tests.client import jobs_for_tests
from tests.worker.conftest import WorkerProcess, until

assert jobs_for_tests  # imported: its decorated functions are what enqueue can name

WAITING = 500
NAME = "noeta-waits-test"


async def connections_of(url: str, name: str) -> int:
    """Server connections of a client named `name`: its pool's, and LISTEN connections
    (named `noeta-listen`; no worker runs while they are counted)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
        cursor = await connection.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE application_name IN (%s, 'noeta-listen') AND pid <> pg_backend_pid()",
            (name,),
        )
        row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


async def test_500_results_awaited_at_once_share_one_listener(
    postgres_url: str, job_workers: Callable[..., WorkerProcess]
) -> None:
    await (await open_store(postgres_url, migrate=True)).close()
    async with AsyncClient(postgres_url, application_name=NAME) as client:
        handles = [
            await client.enqueue("flaky", {"fails": 0}, id=f"j{n:03}") for n in range(WAITING)
        ]
        before = await connections_of(postgres_url, NAME)
        waits = [asyncio.create_task(client.result(handle, timeout=120)) for handle in handles]

        async def all_waiting() -> bool:
            return client.waiting == WAITING

        await until(all_waiting, "every result() call has read its row and waits")
        assert await connections_of(postgres_url, NAME) <= before + 2
        job_workers(postgres_url, "w", concurrency=8)
        assert await asyncio.gather(*waits) == ["1"] * WAITING
        assert client.waiting == 0


async def test_a_result_for_an_unknown_id_fails_and_leaves_no_connection(
    postgres_url: str,
) -> None:
    await (await open_store(postgres_url, migrate=True)).close()
    client = AsyncClient(postgres_url, application_name=NAME)
    with pytest.raises(UnknownTask):
        await client.result("never-was", timeout=30)
    assert client.waiting == 0
    await client.close()

    async def none_left() -> bool:
        return await connections_of(postgres_url, NAME) == 0

    await until(none_left, "the client's connections are closed")
