"""Workers are first-class (issue 31 item 1, ADR-0100), with real `noeta worker`
processes: a name a live worker holds is refused, a killed worker is listed dead and its
name free, a worker stopped past its lease comes back alive (said once), and the counts
cost no statement per task. Every wait is on a row or a process state, never a time."""

from __future__ import annotations

import signal
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from noeta.core.ports.store import Store
from noeta.core.ports.worker_registry import WorkerEntry
from tests.worker import test_idle_pickup
from tests.worker.conftest import WorkerProcess, add_task, status_of, until
from tests.worker.test_idle_pickup import reset_statements, statements

# Its private server with pg_stat_statements, and a schema on it per test.
counted_server = test_idle_pickup.counted_server
counted = test_idle_pickup.counted

REVIVED = "it is live again"


async def row_of(store: Store, name: str) -> WorkerEntry | None:
    registry = store.capabilities.workers
    assert registry is not None
    found = [w for w in await registry.listed_workers(departed=True) if w.id == name]
    return found[0] if found else None


async def until_row(
    store: Store, name: str, what: str, check: Callable[[WorkerEntry], bool]
) -> WorkerEntry:
    async def matches() -> bool:
        row = await row_of(store, name)
        return row is not None and check(row)

    await until(matches, f"worker {name}'s row is {what}", within=60)
    row = await row_of(store, name)
    assert row is not None
    return row


async def seen_after(store: Store, name: str, moment: datetime) -> datetime:
    """The worker's next round after `moment`: its last sighting then."""

    def later(row: WorkerEntry) -> bool:
        return row.last_seen is not None and row.last_seen > moment

    row = await until_row(store, name, "seen again", later)
    assert row.last_seen is not None
    return row.last_seen


async def test_a_name_a_live_worker_holds_is_refused(
    store: Store, postgres_url: str, workers: Callable[..., WorkerProcess]
) -> None:
    first = workers(postgres_url, "w1", lease=30)
    pid = first.process.pid
    await until_row(store, "w1", "live", lambda w: w.state == "live" and w.pid == pid)
    second = workers(postgres_url, "w1", lease=30)
    assert await second.exit_code(within=60) == 1
    said = second.log().strip().splitlines()
    assert said[-1].startswith(
        f"noeta: error: worker name 'w1' is held by a live worker (pid {pid}"
    )
    assert "Traceback" not in second.log()
    kept = await row_of(store, "w1")
    assert kept is not None and (kept.pid, kept.state) == (pid, "live")


async def test_a_killed_worker_is_listed_dead_and_its_name_is_free(
    store: Store, postgres_url: str, workers: Callable[..., WorkerProcess]
) -> None:
    killed = workers(postgres_url, "w1", lease=2)
    pid = killed.process.pid
    await until_row(store, "w1", "live", lambda w: w.state == "live" and w.pid == pid)
    killed.signal(signal.SIGKILL)
    assert await killed.exit_code() == -signal.SIGKILL
    dead = await until_row(store, "w1", "dead", lambda w: w.state == "dead")
    assert dead.pid == pid
    again = workers(postgres_url, "w1", lease=2)
    fresh = await until_row(store, "w1", "live again", lambda w: w.state == "live")
    assert fresh.pid == again.process.pid != pid
    assert fresh.started_at is not None and dead.started_at is not None
    assert fresh.started_at > dead.started_at


async def test_a_worker_restarted_on_its_host_takes_its_name_at_once(
    store: Store, postgres_url: str, workers: Callable[..., WorkerProcess]
) -> None:
    """SIGKILL and start again under the name (systemd, a harness): the killed process is
    gone from this host, so the new one need not wait out its lease of ten minutes."""
    killed = workers(postgres_url, "w1", lease=600)
    pid = killed.process.pid
    await until_row(store, "w1", "live", lambda w: w.state == "live" and w.pid == pid)
    killed.signal(signal.SIGKILL)
    assert await killed.exit_code() == -signal.SIGKILL
    again = workers(postgres_url, "w1", lease=600)
    await until_row(store, "w1", "the new run's", lambda w: w.pid == again.process.pid)
    assert again.process.poll() is None
    assert f"was held by pid {pid} on this host, which has exited" in again.log()


async def test_a_worker_stopped_past_its_lease_comes_back_alive_said_once(
    store: Store, postgres_url: str, workers: Callable[..., WorkerProcess]
) -> None:
    # A lease of 4 s: a loaded machine does not hold the worker's round past it unasked.
    frozen = workers(postgres_url, "w1", lease=4)
    await until_row(store, "w1", "live", lambda w: w.state == "live")
    frozen.signal(signal.SIGSTOP)
    await until(frozen.paused, "the worker is stopped")
    dead = await until_row(store, "w1", "dead", lambda w: w.state == "dead")
    frozen.signal(signal.SIGCONT)
    back = await until_row(store, "w1", "live again", lambda w: w.state == "live")
    assert back.last_seen is not None and dead.last_seen is not None
    assert back.last_seen > dead.last_seen
    # Two more rounds: still said once.
    seen = back.last_seen
    for _ in range(2):
        seen = await seen_after(store, "w1", seen)
    frozen.signal(signal.SIGTERM)
    assert await frozen.exit_code() == 0
    assert frozen.log().count(REVIVED) == 1, frozen.log()
    assert "the registry had this worker dead" in frozen.log()
    stopped = await row_of(store, "w1")
    assert stopped is not None and stopped.state == "stopped"


async def test_the_counts_come_with_the_rounds_not_a_statement_per_task(
    counted: tuple[str, Store], tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    url, store = counted
    tasks = 30
    for n in range(tasks):
        await add_task(store, tmp_path, f"t{n}", {"text": "done"})
    await add_task(store, tmp_path, "bad", {"fail_first": [{"status": 400}], "text": "x"})
    await reset_statements(url)
    worker = workers(url, "w", lease=60, poll=0.2)

    async def all_ended() -> bool:
        ended = [await status_of(store, f"t{n}") for n in range(tasks)]
        return ended == ["done"] * tasks and await status_of(store, "bad") == "failed"

    await until(all_ended, "every task ended", within=120)
    worker.signal(signal.SIGTERM)
    assert await worker.exit_code() == 0
    row = await row_of(store, "w")
    assert row is not None
    assert (row.state, row.processed, row.failed) == ("stopped", tasks + 1, 1)
    counts = await statements(url)
    rounds = sum(calls for query, calls in counts.items() if "INSERT INTO workers" in query)
    stops = sum(calls for query, calls in counts.items() if "UPDATE workers" in query)
    # A round every 20 s (a third of the lease), whatever the tasks: the first, and one
    # more at most if the tasks took longer than a round; never one a task.
    assert 1 <= rounds < tasks / 3, counts
    assert stops == 1, counts
