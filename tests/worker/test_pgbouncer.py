"""Workers, the scheduler and a client through a real PgBouncer in transaction mode
(ADR-0106): the pooler's URL in NOETA_STORE, PostgreSQL's own in NOETA_STORE_SESSION for
LISTEN and the prune's lock; and the pooler restarted under running workers."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from noeta.client import AsyncClient
from noeta.core.ports.store import FireOutcome, Store
from noeta.testing.pgbouncer import PgBouncer
from tests.scheduler.test_scheduler_processes import SchedulerProcess, fired
from tests.worker.conftest import WorkerProcess, log_types, status_of, until

TASKS = 6


@pytest.fixture
def pooled_url(pgbouncer: PgBouncer, postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The schema's URL through PgBouncer; the session URL in this process's environment,
    which the client here and every process a test starts read."""
    monkeypatch.setenv("NOETA_STORE_SESSION", postgres_url)
    return pgbouncer.pooled(postgres_url)


def script(folder: Path, name: str, *replies: dict[str, object]) -> str:
    path = folder / f"{name}.yaml"
    path.write_text(json.dumps({"replies": list(replies)}))  # JSON is YAML
    return f"scripted:{path}"


async def test_workers_the_scheduler_and_a_client_run_through_pgbouncer(
    store: Store,
    pooled_url: str,
    postgres_url: str,
    pgbouncer: PgBouncer,
    tmp_path: Path,
    workers: Callable[..., WorkerProcess],
) -> None:
    tick = script(tmp_path, "tick", {"text": "ticked"})
    cron = tmp_path / "cron.yaml"
    entry = {"name": "s", "schedule": "* * * * *", "task": {"prompt": "t", "model": tick}}
    entry |= {"missed": "run_all", "max_catch_up": 3, "overlap": "allow"}
    cron.write_text(json.dumps({"schedules": [entry]}))
    await store.cron_marks(["s"], await store.clock() - timedelta(minutes=3))
    scheduler = SchedulerProcess(pooled_url, cron, tmp_path, "scheduler")
    started = [workers(pooled_url, f"w{n}", lease=10) for n in range(2)]
    try:
        async with AsyncClient(pooled_url, application_name="noeta-pooled-client") as client:
            model = script(tmp_path, "answer", {"text": "answered"})
            handles = [await client.submit("go", model=model) for _ in range(TASKS)]
            results = [await client.result(handle, timeout=60) for handle in handles]
        assert results == ["answered"] * TASKS

        async def caught_up() -> bool:
            history = await fired(store)
            done = [await status_of(store, task.id) for task in await store.list_tasks()]
            return len(history) >= 3 and done.count("done") == len(done) >= TASKS + 3

        await until(caught_up, "the scheduler's tasks ran too", within=60)
        assert {outcome for _, outcome in await fired(store)} == {FireOutcome.CREATED}
        # The pooled path went through PgBouncer; every LISTEN went to PostgreSQL itself.
        clients = pgbouncer.admin("SHOW CLIENTS")
        names = {row[-1] for row in clients}  # PgBouncer's last column: application_name
        assert any(name and name.startswith("noeta-worker:") for name in names)
        assert "noeta-listen" not in names
        async with await psycopg.AsyncConnection.connect(postgres_url) as direct:
            listening = await direct.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE application_name = 'noeta-listen' AND query LIKE 'LISTEN%'"
            )
            row = await listening.fetchone()
        assert row is not None and row[0] >= 1
    finally:
        scheduler.process.terminate()
        assert await scheduler.exit_code() == 0
        for worker in started:
            worker.stop()
    assert "retention:" not in scheduler.log()


async def test_a_pgbouncer_restart_while_workers_run_loses_nothing(
    store: Store,
    pooled_url: str,
    pgbouncer: PgBouncer,
    tmp_path: Path,
    workers: Callable[..., WorkerProcess],
) -> None:
    step = {"tool_calls": [{"id": "c1", "name": "Bash", "input": {"command": "true"}}]}
    model = script(tmp_path, "stepped", step, {"text": "finished"})
    for _ in range(2):
        workers(pooled_url, f"w{_}", lease=10)
    async with AsyncClient(pooled_url, application_name="noeta-pooled-client") as client:
        first = [(await client.submit("go", model=model)).id for _ in range(TASKS)]

    async def one_running() -> bool:
        return any(["ToolStarted" in await log_types(store, task) for task in first])

    await until(one_running, "a worker runs a step through the pooler")
    pgbouncer.restart()  # every client and server session cut at once
    async with AsyncClient(pooled_url, application_name="noeta-pooled-client") as client:
        second = [(await client.submit("go", model=model)).id for _ in range(TASKS)]

    async def all_done() -> bool:
        return all([await status_of(store, task) == "done" for task in first + second])

    await until(all_done, "every task finished after the restart", within=90)
    for task in first + second:  # nothing lost: one answer each, no failure
        types = await log_types(store, task)
        assert types.count("TaskFinished") == 1, (task, types)
