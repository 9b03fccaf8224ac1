"""The web view's workers page (issue 31 item 1): every live worker, the idle ones too,
with what it holds and has done; the recently dead and stopped below; a holder the
registry does not list still shown. Names are escaped like every other value."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from starlette.testclient import TestClient

from noeta.core.ports.store import Store
from noeta.core.ports.worker_registry import WorkerEntry, WorkerRegistry
from noeta.testing.store_contract.fixtures import until_store_time
from noeta.web.ops_pages import HELD_SHOWN
from tests.web.conftest import task_with_log

LEASE = 600.0


def run_of(name: str, **reported: object) -> WorkerEntry:
    fields: dict[str, object] = {"host": "box-1", "pid": 11, "version": "9.9", "concurrency": 4}
    return WorkerEntry(name, ("default",), ("core",), instance=name, **(fields | reported))  # type: ignore[arg-type]


def registry_of(store: Store) -> WorkerRegistry:
    registry = store.capabilities.workers
    assert registry is not None
    return registry


def section(page: str, heading: str) -> str:
    """The part of the page from `heading` to the next heading of its level."""
    start = page.index(f"<h2>{heading}")
    end = page.find("<h2>", start + 1)
    return page[start : end if end >= 0 else len(page)]


async def test_an_idle_fleet_is_listed_not_said_empty(
    store: Store, web: Callable[..., TestClient]
) -> None:
    registry = registry_of(store)
    for n in range(4):
        await registry.record_worker(run_of(f"idle-{n}", pid=100 + n, processed=n), LEASE)
    page = web().get("/workers").text
    assert "no worker holds a task now" not in page
    live = section(page, "Live workers")
    for n in range(4):
        assert f"<td>idle-{n}</td><td>live</td><td>box-1</td><td>{100 + n}</td>" in live
    assert "<td>9.9</td><td>default</td><td>core</td><td>4</td><td>0</td>" in live


async def test_a_worker_shows_what_it_holds_and_the_departed_are_below(
    store: Store, web: Callable[..., TestClient]
) -> None:
    registry = registry_of(store)
    await registry.record_worker(run_of("gone<1>", pid=33), 0.3)
    # departed too: under load its 0.3 s may be over already
    seen = (await registry.listed_workers(departed=True))[0].last_seen
    assert seen is not None
    await until_store_time(store, seen + timedelta(seconds=0.3))
    await registry.record_worker(run_of("busy", processed=12, failed=2), LEASE)
    await registry.record_worker(run_of("left", pid=44), LEASE)
    await registry.worker_stopped(run_of("left", pid=44, processed=5))
    await task_with_log(store, "held-1", worker="busy")
    await task_with_log(store, "held-2", worker="old-version")
    page = web().get("/workers").text
    live = section(page, "Live workers")
    assert "<td>busy</td><td>live</td>" in live and "<td>1</td><td>12</td><td>2</td>" in live
    assert "gone" not in live and "left" not in live
    departed = section(page, "Dead or stopped in the last hour")
    assert "<td>gone&lt;1&gt;</td><td>dead</td><td>box-1</td><td>33</td>" in departed
    assert "<td>left</td><td>stopped</td>" in departed and " ago</td>" in departed
    held = section(page, "busy holds")
    assert "held-1" in held and "lease ends in" in held
    unlisted = section(page, "old-version holds")
    assert "not in the registry" in unlisted and "held-2" in unlisted


async def test_the_workers_page_is_live_like_the_queues_page(
    store: Store, web: Callable[..., TestClient]
) -> None:
    await registry_of(store).record_worker(run_of("w-1"), LEASE)
    page = web().get("/workers").text
    # live.js reads a data-refresh page again and swaps its #figures and status line.
    assert '<body data-refresh="5">' in page
    figures = page[page.index('<div id="figures">') :]
    assert "<td>w-1</td><td>live</td>" in figures


async def test_a_worker_holding_many_shows_its_first_and_counts_the_rest(
    store: Store, web: Callable[..., TestClient]
) -> None:
    await registry_of(store).record_worker(run_of("many"), LEASE)
    for n in range(HELD_SHOWN + 3):
        await task_with_log(store, f"held-{n:02}", worker="many")
    held = section(web().get("/workers").text, "many holds")
    assert held.startswith(f"<h2>many holds ({HELD_SHOWN + 3})</h2>")
    assert held.count("/tasks/held-") == HELD_SHOWN
    assert "and 3 more" in held and "/tasks?status=running" in held
