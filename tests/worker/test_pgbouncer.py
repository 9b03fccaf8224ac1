"""Workers, the scheduler and a client through a real PgBouncer in transaction mode
(ADR-0106): the pooler's URL in NOETA_STORE, PostgreSQL's own in NOETA_STORE_SESSION for
LISTEN and the prune's lock; and the pooler restarted under running workers."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from noeta.client import AsyncClient
from noeta.core.ports.store import FireOutcome, Store
from noeta.testing.fault_proxy import FaultProxy
from noeta.testing.pgbouncer import PgBouncer
from tests.scheduler.test_scheduler_processes import fired
from tests.worker.conftest import NoetaProcess, WorkerProcess, log_types, status_of, until

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


async def test_workers_the_scheduler_and_a_client_through_pgbouncer_survive_its_restart(
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
    step = {"tool_calls": [{"id": "c1", "name": "Bash", "input": {"command": "true"}}]}
    model = script(tmp_path, "stepped", step, {"text": "finished"})
    arguments = ["scheduler", "--cron", str(cron), "--retain", "1d"]  # prunes at its start
    scheduler = NoetaProcess(arguments, "scheduler", tmp_path, env={"NOETA_STORE": pooled_url})
    # A lost claim waits out its lease before another worker takes it over: 2 s.
    started = [workers(pooled_url, f"w{n}", lease=2) for n in range(2)]
    try:
        async with AsyncClient(pooled_url, application_name="noeta-pooled-client") as client:
            first = [(await client.submit("go", model=model)).id for _ in range(TASKS)]

            async def one_running() -> bool:
                return any(["ToolStarted" in await log_types(store, task) for task in first])

            await until(one_running, "a worker runs a step through the pooler")
            pgbouncer.restart()  # every client and server session through it cut at once
            second = [await client.submit("go", model=model) for _ in range(TASKS)]
            # Waited for with LISTEN on the session URL, read through the pooler.
            results = [await client.result(handle, timeout=60) for handle in second]
        assert results == ["finished"] * TASKS

        async def caught_up() -> bool:
            done = [await status_of(store, task.id) for task in await store.list_tasks()]
            return len(await fired(store)) >= 3 and done.count("done") == len(done)

        await until(caught_up, "every task and the scheduler's ran", within=60)
        assert {outcome for _, outcome in await fired(store)} == {FireOutcome.CREATED}
        for task in await store.list_tasks():  # nothing lost: one finish each, all done
            assert (await log_types(store, task.id)).count("TaskFinished") == 1, task.id
        assert len(await store.list_tasks()) >= 2 * TASKS + 3
        # The pooled path went through PgBouncer; every LISTEN went to PostgreSQL itself.
        names = {row[-1] for row in pgbouncer.admin("SHOW CLIENTS")}  # application_name
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
    assert "looking again later" not in scheduler.log()  # its prune (a session of its own)


async def test_a_worker_pgbouncer_refuses_asks_again_each_poll_not_after_a_grown_back_off(
    postgres_url: str,
    pgbouncer_on_a_path: PgBouncer,
    pgbouncer_server_path: FaultProxy,
    tmp_path: Path,
    workers: Callable[..., WorkerProcess],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # ADR-0155: PgBouncer refuses at once for as long as its server_login_retry (15 s by
    # default). A back-off grown over that window (0.5, 1, 2, 4, 8 s ... up to a lease)
    # kept a worker idle about as long again after it ended.
    monkeypatch.setenv("NOETA_STORE_SESSION", postgres_url)
    worker = workers(pgbouncer_on_a_path.pooled(postgres_url), "w", lease=30, poll=1.0)

    async def opened() -> bool:  # its pools' connections through PgBouncer are open
        return "worker w: queues" in worker.log()

    await until(opened, "the worker opened its store through PgBouncer")
    pgbouncer_server_path.stop()  # PgBouncer's server sessions end, its logins fail
    await pgbouncer_on_a_path.until_no_server_sessions()

    def waits() -> list[float]:
        return [float(wait) for wait in _REFUSED_CLAIM.findall(worker.log())]

    async def refused_five_times() -> bool:
        return len(waits()) >= 5

    await until(refused_five_times, "five claims refused", within=60)
    assert max(waits()[:5]) <= 1.0, worker.log()  # the poll, each time


_REFUSED_CLAIM = re.compile(
    r"claim: PostgreSQL at \S+ cannot take it now: (?:server login has been failing|"
    r"query_wait_timeout).*; trying again in at most ([\d.]+) s"
)
