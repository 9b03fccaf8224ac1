"""`noeta workers [--all] [--json]` through the real executable (issue 31 item 1): the
live workers with what each holds and has done; with --all the dead and the stopped,
each said so with when it was last seen."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from noeta.backends.stores import open_store
from noeta.core.ports.store import NewEvent, NewTask, Store
from noeta.core.ports.worker_registry import WorkerEntry, WorkerRegistry
from noeta.testing.store_contract.fixtures import until_store_time
from tests.cli.test_queue_cli import noeta

LEASE = 600.0


def run_of(name: str, **reported: object) -> WorkerEntry:
    fields: dict[str, object] = {"host": "box", "pid": 11, "version": "9.9", "concurrency": 4}
    return WorkerEntry(name, ("default", "mail"), ("core",), instance=name, **(fields | reported))  # type: ignore[arg-type]


def registry_of(store: Store) -> WorkerRegistry:
    registry = store.capabilities.workers
    assert registry is not None
    return registry


@pytest.fixture
async def url(tmp_path: Path) -> str:
    """Two live workers (one holding a task, one idle), one stopped, one dead."""
    url = f"sqlite:///{tmp_path / 'noeta.db'}"
    store = await open_store(url, migrate=True)
    try:
        registry = registry_of(store)
        await registry.record_worker(run_of("gone", pid=33), 0.3)
        # departed too: under load its 0.3 s may be over already
        seen = (await registry.listed_workers(departed=True))[0].last_seen
        assert seen is not None
        await until_store_time(store, seen + timedelta(seconds=0.3))
        await registry.record_worker(run_of("busy", processed=12, failed=2), LEASE)
        await registry.record_worker(run_of("idle", pid=22), LEASE)
        await registry.record_worker(run_of("left", pid=44), LEASE)
        await registry.worker_stopped(run_of("left", pid=44, processed=5))
        await store.create_task(NewTask("t1", [NewEvent("created", {})]))
        assert await store.claim("busy", ["default"], LEASE) is not None
    finally:
        await store.close()
    return url


def test_workers_lists_the_live_ones_idle_included(url: str) -> None:
    listed = noeta(url, "workers")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    headings = "name state host pid version queues concurrency held processed failed last seen"
    assert lines[0].split() == headings.split()
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert set(rows) == {"busy", "idle"}
    # name state host pid version queues concurrency held processed failed
    assert " ".join(rows["busy"][:10]) == "busy live box 11 9.9 default,mail 4 1 12 2"
    assert " ".join(rows["idle"][:10]) == "idle live box 22 9.9 default,mail 4 0 0 0"
    assert rows["idle"][-1] == "ago"


def test_workers_all_adds_the_dead_and_the_stopped(url: str) -> None:
    listed = noeta(url, "workers", "--all")
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines()[1:]}
    assert list(rows) == ["busy", "idle", "gone", "left"]  # the live first
    assert rows["gone"][1:4] == ["dead", "box", "33"]
    assert rows["left"][1] == "stopped" and rows["left"][8] == "5"


def test_workers_json_holds_every_field_and_the_held_tasks(url: str) -> None:
    listed = noeta(url, "workers", "--all", "--json")
    assert listed.returncode == 0, listed.stderr
    document = {w["name"]: w for w in json.loads(listed.stdout)}
    busy = document["busy"]
    assert busy["state"] == "live" and busy["held"] == ["t1"]
    assert (busy["processed"], busy["failed"], busy["concurrency"]) == (12, 2, 4)
    assert busy["queues"] == ["default", "mail"] and busy["offers"] == ["core"]
    assert busy["started_at"] and busy["last_seen"] and busy["seconds_since_seen"] >= 0
    assert document["gone"]["state"] == "dead" and document["left"]["state"] == "stopped"


def test_no_worker_is_said_in_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    assert noeta(url, "db", "migrate").returncode == 0
    listed = noeta(url, "workers")
    assert listed.returncode == 0 and listed.stdout == "no live worker\n"
    assert noeta(url, "workers", "--json").stdout.strip() == "[]"
