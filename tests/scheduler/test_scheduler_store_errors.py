"""A real `noeta scheduler` outlives its database turning read-only (as after a failover,
its sessions ended too): it backs off, and fires the slots due once writes are accepted."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from noeta.backends.stores import open_store
from noeta.backends.stores.postgres import migrate_database
from tests.scheduler.test_scheduler_processes import (
    SchedulerProcess,
    cron_file,
    fired,
    schedulers,
)
from tests.worker.conftest import until

if TYPE_CHECKING:  # imported only for types: pytest would try to collect a Test* class
    from noeta.testing.postgres import TestPostgres

__all__ = ["schedulers"]  # the fixture


async def test_a_scheduler_outlives_a_read_only_database(
    database_url: str,
    postgres_server: TestPostgres,
    tmp_path: Path,
    schedulers: Callable[..., SchedulerProcess],
) -> None:
    await migrate_database(database_url)
    store = await open_store(database_url)
    try:  # as if it last looked 5 minutes ago: slots to catch up once it can write
        await store.cron_marks(["s"], await store.clock() - timedelta(minutes=5))
    finally:
        await store.close()
    cron = cron_file(tmp_path, missed="run_all", max_catch_up=3, overlap="allow")
    postgres_server.set_read_only(database_url, True)
    scheduler = schedulers(database_url, cron, "scheduler")

    async def refused_twice() -> bool:
        assert scheduler.process.poll() is None, scheduler.log()
        return scheduler.log().count("read-only transaction") >= 2

    await until(refused_twice, "the scheduler's looks are refused twice", within=60)
    postgres_server.set_read_only(database_url, False)
    store = await open_store(database_url)
    try:

        async def caught_up() -> bool:
            assert scheduler.process.poll() is None, scheduler.log()
            return len(await fired(store)) >= 3

        await until(caught_up, "the missed slots are fired", within=60)
    finally:
        await store.close()
    assert "Traceback" not in scheduler.log()
