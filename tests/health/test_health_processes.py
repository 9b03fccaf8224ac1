"""`--health` on real `noeta worker` and `noeta scheduler` processes: a frozen claim loop
fails /livez by name, a store that stops answers makes the process not ready but still
live (and its own metrics still served), a stopping worker is not ready, and `--check`
says so in one line."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from noeta.core.ports.store import Store
from noeta.testing.fault_proxy import FaultProxy
from tests.worker.conftest import (
    NoetaProcess,
    WorkerProcess,
    add_task,
    log_types,
    store,
    until,
    workers,
)

__all__ = ["store", "workers"]  # the fixtures

SERVING = re.compile(r"health: serving /livez, /readyz and /metrics on (\S+)")


async def health_address(process: NoetaProcess) -> str:
    """Where the process's health server listens (it was given port 0), from its log."""
    found: list[str] = []

    async def serving() -> bool:
        assert process.process.poll() is None, process.log()
        match = SERVING.search(process.log())
        if match:
            found.append(match[1])
        return bool(match)

    await until(serving, "the health server listens")
    address = found[0]

    async def started() -> bool:  # it serves while it waits for its store too (ADR-0157)
        reasons = (await get_json(address, "/readyz"))[1]["reasons"]
        return not [reason for reason in reasons if reason.startswith("starting")]

    await until(started, "the process has opened its store")
    return address


async def get(address: str, path: str) -> tuple[int, str]:
    def fetch() -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://{address}{path}", timeout=10) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    return await asyncio.to_thread(fetch)


async def get_json(address: str, path: str) -> tuple[int, dict[str, Any]]:
    status, body = await get(address, path)
    return status, json.loads(body)


def noeta(*arguments: str, url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NOETA_STORE": url, "NOETA_FAILPOINTS": ""}
    command = [sys.executable, "-m", "noeta", *arguments]
    return subprocess.run(command, check=False, env=env, capture_output=True, text=True, timeout=60)


async def test_a_frozen_claim_loop_fails_livez_by_name_and_check_says_so(
    store: Store, postgres_url: str, workers: Callable[..., WorkerProcess]
) -> None:
    # The failpoint holds the claim loop at its first turn for ten minutes; the renewer
    # and the event loop go on turning.
    worker = workers(
        postgres_url,
        "frozen",
        lease=30,
        poll=0.2,
        failpoints="worker.claim_loop=sleep(600000)",
        extra=["--health", "127.0.0.1:0", "--health-stuck-after", "0.5"],
    )
    address = await health_address(worker)
    answers: list[tuple[int, dict[str, Any]]] = []

    async def stuck() -> bool:
        answers.append(await get_json(address, "/livez"))
        return answers[-1][0] == 503

    await until(stuck, "/livez fails")
    body = answers[-1][1]
    assert "claim loop" in body["stuck"]
    loops = {loop["loop"]: loop for loop in body["loops"]}
    assert loops["claim loop"]["stuck"] and loops["claim loop"]["last_turn"]
    assert {"claim loop", "lease renewer", "event loop"} <= loops.keys()
    assert (await get_json(address, "/readyz"))[0] == 200  # stuck is not unready

    checked = await asyncio.to_thread(
        noeta, "worker", "--check", "--health", address, url=postgres_url
    )
    assert checked.returncode == 1
    assert checked.stdout == ""
    assert len(checked.stderr.strip().splitlines()) == 1
    assert checked.stderr.startswith("noeta: not live: stuck: ")
    assert "claim loop" in checked.stderr


@pytest.fixture
def proxy(postgres_url: str) -> Iterator[FaultProxy]:
    parts = conninfo_to_dict(postgres_url)
    proxy = FaultProxy(str(parts["host"]), int(parts["port"]))
    proxy.start()
    yield proxy
    if not proxy._loop.is_closed():  # the test may have stopped it
        proxy.stop()


async def test_a_store_that_stops_answering_makes_the_worker_not_ready_but_live(
    store: Store, postgres_url: str, proxy: FaultProxy, workers: Callable[..., WorkerProcess]
) -> None:
    proxied = make_conninfo(postgres_url, host="127.0.0.1", port=str(proxy.port))
    worker = workers(proxied, "cut-off", lease=30, extra=["--health", "127.0.0.1:0"])
    address = await health_address(worker)
    assert await get_json(address, "/readyz") == (200, {"ready": True, "reasons": []})
    status, text = await get(address, "/metrics")
    assert status == 200
    assert 'noeta_queue_depth{noeta_queue="default"} 0.0' in text  # read at the scrape

    proxy.stop()  # PostgreSQL is gone, as far as the worker can tell

    async def not_ready() -> bool:
        return (await get(address, "/readyz"))[0] == 503

    await until(not_ready, "/readyz fails")
    body = (await get_json(address, "/readyz"))[1]
    assert body["ready"] is False
    assert [reason.split(":")[0] for reason in body["reasons"]] == ["store"]
    assert (await get_json(address, "/livez"))[0] == 200
    status, text = await get(address, "/metrics")  # the store readings fail, bounded
    assert status == 200
    assert "process_cpu_seconds_total" in text and "noeta_queue_depth" in text
    assert worker.process.poll() is None


async def test_a_stopping_worker_is_not_ready_while_its_step_finishes(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    long_sleep = {"tool_calls": [{"id": "c1", "name": "Bash", "input": {"command": "sleep 60"}}]}
    await add_task(store, tmp_path, "t", long_sleep, {"text": "done"})
    worker = workers(
        postgres_url, "draining", lease=30, grace=30, extra=["--health", "127.0.0.1:0"]
    )
    address = await health_address(worker)

    async def tool_started() -> bool:
        return "ToolStarted" in await log_types(store, "t")

    await until(tool_started, "the tool starts")
    assert (await get(address, "/readyz"))[0] == 200
    text = (await get(address, "/metrics"))[1]
    assert 'noeta_claims_total{noeta_claim_taken_over="false"} 1.0' in text
    labels = set(re.findall(r'[{,](\w+)="', text))
    assert labels and not [label for label in labels if "task" in label]  # no task id

    worker.signal(signal.SIGTERM)  # the step may finish within the 30 s grace

    async def draining() -> bool:
        return (await get(address, "/readyz"))[0] == 503

    await until(draining, "/readyz says draining")
    assert (await get_json(address, "/readyz"))[1]["reasons"] == [
        "draining: the process is stopping"
    ]
    assert (await get_json(address, "/livez"))[0] == 200
    assert worker.process.poll() is None  # still running its step
    worker.signal(signal.SIGTERM)  # hand it back now
    assert await worker.exit_code(within=20) == 0


async def test_a_worker_waiting_for_its_database_is_live_and_not_ready(
    postgres_url: str, proxy: FaultProxy, workers: Callable[..., WorkerProcess]
) -> None:
    # A liveness probe must not restart a process for waiting (ADR-0157).
    proxied = make_conninfo(postgres_url, host="127.0.0.1", port=str(proxy.port))
    proxy.stop()  # nothing listens there: refused
    worker = workers(proxied, "early", extra=["--health", "127.0.0.1:0"])

    async def waiting() -> bool:
        return "waiting for it" in worker.log()

    await until(waiting, "the worker waits for its database")
    address = SERVING.findall(worker.log())[0]
    assert (await get_json(address, "/livez"))[0] == 200
    assert await get_json(address, "/readyz") == (
        503,
        {"ready": False, "reasons": ["starting: the process has not opened its store yet"]},
    )
    worker.signal(signal.SIGTERM)
    assert await worker.exit_code(within=20) == 0


async def test_the_scheduler_serves_its_tick(
    store: Store, postgres_url: str, tmp_path: Path
) -> None:
    arguments = ["scheduler", "--health", "127.0.0.1:0"]
    scheduler = NoetaProcess(arguments, "scheduler", tmp_path, env={"NOETA_STORE": postgres_url})
    try:
        address = await health_address(scheduler)

        async def ticking() -> bool:  # its loops report from their first turn
            status, body = await get_json(address, "/livez")
            assert status == 200
            return {"scheduler tick", "event loop"} <= {loop["loop"] for loop in body["loops"]}

        await until(ticking, "/livez lists the scheduler's tick")
        assert (await get_json(address, "/readyz"))[0] == 200
        assert "process_cpu_seconds_total" in (await get(address, "/metrics"))[1]
    finally:
        scheduler.stop()
