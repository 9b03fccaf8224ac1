"""`noeta worker --log-level` (or NOETA_LOG_LEVEL), as Celery's `--loglevel`: at `warning`
a real worker runs its tasks without the two lines it writes for each (`claimed task …`,
`task …: done`), keeping its warnings and errors and its start and stop lines; a level
that is none is one line, exit 2."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from noeta.core.ports.store import Store
from noeta.testing.command_line import run_in_process

from .conftest import WorkerProcess, add_task, status_of, until


@pytest.mark.parametrize(
    ("extra", "env"),
    [(["--log-level", "WARNING"], {}), ([], {"NOETA_LOG_LEVEL": "warning"})],
    ids=["option", "environment"],
)
async def test_a_worker_at_warning_writes_no_line_for_each_task(
    store: Store,
    postgres_url: str,
    tmp_path: Path,
    workers: Callable[..., WorkerProcess],
    extra: list[str],
    env: dict[str, str],
) -> None:
    await add_task(store, tmp_path, "t", {"text": "done"})
    worker = workers(postgres_url, "quiet", lease=30, extra=extra, env=env)

    async def done() -> bool:
        return await status_of(store, "t") == "done"

    await until(done, "the quiet worker runs the task")
    worker.signal(15)  # SIGTERM: it stops, and says nothing of it at warning either
    assert await worker.exit_code() == 0
    written = worker.log()
    assert "task t" not in written, written
    # Its start and stop lines stay, as Celery's banner does: nothing else at INFO.
    said = [line for line in written.splitlines() if " INFO " in line]
    assert len(said) == 2, written
    assert "INFO noeta.worker: worker quiet: queues default, concurrency " in said[0], said
    assert said[1].endswith("INFO noeta.worker: worker quiet: stopped"), said


async def test_a_worker_at_info_writes_them(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    # The default, beside the test above: the lines it drops are there without the option.
    await add_task(store, tmp_path, "t", {"text": "done"})
    worker = workers(postgres_url, "talkative", lease=30)

    async def said() -> bool:
        return "task t: done" in worker.log()

    await until(said, "the worker says the task is done")
    assert "claimed task t (epoch 1)" in worker.log()


def test_a_log_level_from_the_environment_that_is_none_is_one_line(tmp_path: Path) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("NOETA_", "OTEL_"))}
    environment["NOETA_STORE"] = f"sqlite:///{tmp_path / 'noeta.db'}"
    environment["NOETA_LOG_LEVEL"] = "verbose"
    result = run_in_process(["worker"], environment)
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "'verbose' is not one of 'debug', 'info', 'warning', 'error'" in lines[0]
