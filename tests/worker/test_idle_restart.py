"""The idle registry across a PostgreSQL crash (ADR-0133): `idle_workers` is unlogged, so
a crash empties it; every idle worker, whose LISTEN the restart ended, listens again,
registers anew, and is called for a task created after the restart. The poll is 300 s
and the registration's refresh 60 s away: only a new registration can call them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from noeta.backends.stores import open_store
from noeta.backends.stores.embedded import EmbeddedPostgres
from noeta.core.ports.store import Store

from .conftest import WorkerProcess, add_task, status_of, until

IDLE_ROWS = "SELECT count(*) FROM idle_workers"
UNLOGGED = "SELECT relpersistence = 'u' FROM pg_class WHERE oid = 'idle_workers'::regclass"


async def value(url: str, query: str) -> object:
    try:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
            row = await (await admin.execute(query)).fetchone()
    except psycopg.OperationalError:  # still starting
        return None
    return None if row is None else row[0]


async def done(store: Store, task_id: str) -> bool:
    try:
        return await status_of(store, task_id) == "done"
    except Exception:  # our own pool reconnects after the restart
        return False


@pytest.mark.slow
async def test_idle_workers_register_again_after_a_crash_and_are_called(
    private_server: EmbeddedPostgres, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    url = private_server.start()
    await (await open_store(url, migrate=True)).close()
    assert await value(url, UNLOGGED) is True
    for name in ("a", "b"):
        # lease 120: a registration is refreshed only every 60 s; poll 300.
        workers(url, name, lease=120, poll=300.0, concurrency=1)

    async def both_registered() -> bool:
        return await value(url, IDLE_ROWS) == 2

    await until(both_registered, "both workers wait idle", within=60)
    private_server.stop(mode="immediate")  # a crash: recovery empties the unlogged registry
    private_server.start()  # the same port: the workers' DSN still points at it
    store = await open_store(url)
    try:
        await after_the_restart(url, store, tmp_path)
    finally:
        await store.close()


async def after_the_restart(url: str, store: Store, folder: Path) -> None:
    async def both_registered() -> bool:
        return await value(url, IDLE_ROWS) == 2

    await add_task(store, folder, "at-once", {"text": "done"})  # as the workers come back
    await until(lambda: done(store, "at-once"), "the task created at the restart is done", 60)
    await until(both_registered, "both workers register again", within=60)

    await add_task(store, folder, "after", {"text": "done"})

    await until(lambda: done(store, "after"), "a called worker runs it", within=60)
