"""A real `noeta worker` outlives database errors that are not outages: its database made
read-only (as after a failover), its sessions ended by an admin, its statements timing out
behind a migration's lock. It backs off, keeps claiming, and works again afterwards."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from noeta.backends.stores import open_store
from noeta.backends.stores.postgres import migrate_database

from .conftest import WorkerProcess, add_task, status_of, until

if TYPE_CHECKING:  # imported only for types: pytest would try to collect a Test* class
    from noeta.testing.postgres import TestPostgres


async def test_a_worker_outlives_a_read_only_database_and_ended_sessions(
    database_url: str,
    postgres_server: TestPostgres,
    tmp_path: Path,
    workers: Callable[..., WorkerProcess],
) -> None:
    await migrate_database(database_url)
    worker = workers(database_url, "w", lease=2, poll=0.2)

    async def listening() -> bool:
        return "listening for wake-ups" in worker.log()

    await until(listening, "the worker is up")
    postgres_server.set_read_only(database_url, True)  # and ends the worker's sessions

    async def refused_twice() -> bool:
        assert worker.process.poll() is None, worker.log()
        return worker.log().count("read-only transaction") >= 2

    await until(refused_twice, "the worker's claims are refused twice", within=60)
    postgres_server.set_read_only(database_url, False)  # ends its sessions once more
    await _finishes_a_task(database_url, tmp_path, worker)


async def test_a_worker_outlives_lock_timeouts_behind_a_migration(
    database_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    await migrate_database(database_url)
    # A deployment's own limit, given in the URL: it wins over noeta's default.
    options = f"{conninfo_to_dict(database_url).get('options') or ''} -c lock_timeout=200"
    worker = workers(make_conninfo(database_url, options=options.strip()), "w", lease=2)
    locked = threading.Event()
    release = threading.Event()

    def migration() -> None:  # holds what ALTER TABLE would: every statement waits
        with psycopg.connect(database_url) as connection:
            connection.execute("LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE")
            locked.set()
            release.wait(timeout=60)

    async def listening() -> bool:
        return "listening for wake-ups" in worker.log()

    await until(listening, "the worker is up")
    thread = threading.Thread(target=migration)
    thread.start()
    try:
        await asyncio.to_thread(locked.wait, 30)

        async def timed_out_twice() -> bool:
            assert worker.process.poll() is None, worker.log()
            return worker.log().count("lock timeout") >= 2

        await until(timed_out_twice, "the worker's claims time out twice", within=60)
    finally:
        release.set()
        await asyncio.to_thread(thread.join, 30)
    await _finishes_a_task(database_url, tmp_path, worker)


async def _finishes_a_task(url: str, folder: Path, worker: WorkerProcess) -> None:
    """The worker, still the same process, claims and finishes a new task."""
    store = await open_store(url)
    try:
        await add_task(store, folder, "t", {"text": "written once the store took writes"})

        async def done() -> bool:
            assert worker.process.poll() is None, worker.log()
            return await status_of(store, "t") == "done"

        await until(done, "the task is claimed and finished", within=60)
    finally:
        await store.close()
    assert "Traceback" not in worker.log()
