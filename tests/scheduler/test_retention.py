"""`noeta scheduler --retain`: a real scheduler prunes finished tasks older than the
duration, leaves live ones, and stops promptly; a bad duration stops its start."""

from __future__ import annotations

import signal
from pathlib import Path

from noeta.backends.stores import open_store
from noeta.testing.store_contract.fixtures import created
from noeta.testing.store_contract.retention import finish
from tests.cli.test_prune_cli import noeta, one_line_error
from tests.worker.conftest import NoetaProcess, until


async def test_the_scheduler_prunes_finished_tasks(store_url: str, tmp_path: Path) -> None:
    store = await open_store(store_url, migrate=True)
    try:
        for task_id in ("finished", "live"):
            await store.create_task(created(task_id))
        await finish(store, "finished")
        scheduler = NoetaProcess(
            ["scheduler", "--store", store_url, "--retain", "0s"], "scheduler", tmp_path
        )
        try:

            async def pruned() -> bool:
                return await store.get_task("finished") is None

            await until(pruned, "the scheduler prunes the finished task", 60)

            async def said() -> bool:  # the count is logged after the prune commits
                return "retention: pruned 1 finished tasks" in scheduler.log()

            await until(said, "the scheduler says what it pruned", 60)
            assert await store.get_task("live") is not None
            assert not await store.create_task(created("finished"))  # its id stays taken
        finally:
            scheduler.signal(signal.SIGTERM)
            assert await scheduler.exit_code() == 0, scheduler.log()
    finally:
        await store.close()


def test_a_bad_retention_stops_the_start(tmp_path: Path) -> None:
    result = noeta("scheduler", "--retain", "-30d", store=f"sqlite:///{tmp_path / 'noeta.db'}")
    assert "'-30d' is a negative duration" in one_line_error(result)
    assert not (tmp_path / "noeta.db").exists()  # refused before the store was opened
