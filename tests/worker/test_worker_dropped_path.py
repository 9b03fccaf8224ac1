"""`noeta worker` processes whose network path to PostgreSQL starts dropping every packet
silently, as a firewall or a NAT that forgot their connections does (ADR-0129): the drop
made in the kernel (tests/dropping_path.py), where TCP keepalives meet it."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from noeta.backends.stores.postgres.connection import DEFAULT_DEADLINE_SECONDS
from noeta.core.ports.store import Store
from tests.dropping_path import DroppingPath, dropping_path

from .conftest import (
    REPLACED,
    WorkerProcess,
    add_task,
    an_append_waiting_on_its_row,
    lapse_the_lease,
    log_types,
    status_of,
    until,
)

# A connection idle for 1 s is probed every second, and reset after 2 probes unanswered:
# the kernel finds a dropped peer in about 3 s rather than noeta's 90 s (the URL's own
# keepalives are left whole).
QUICK_KEEPALIVES = {"keepalives_idle": "1", "keepalives_interval": "1", "keepalives_count": "2"}
LONG_LEASE = 600  # never lapses during a test: the test lapses it (lapse_the_lease)


@pytest.fixture
def path(postgres_url: str) -> Iterator[DroppingPath]:
    with dropping_path(postgres_url) as made:
        yield made


async def run_a_first_task(store: Store, folder: Path) -> None:
    """A task run through the path before the fault: the worker's pools, claims'
    connection and LISTENs are open and used."""
    await add_task(store, folder, "warm", {"text": "warm"})

    async def warm_done() -> bool:
        return await status_of(store, "warm") == "done"

    await until(warm_done, "the first task is done")


async def test_a_quiet_workers_dropped_connections_are_found_dead_and_cost_no_task(
    store: Store,
    path: DroppingPath,
    tmp_path: Path,
    workers: Callable[..., WorkerProcess],
) -> None:
    # ADR-0127/0129: a quiet worker's idle sessions, LISTEN included, sit unused while
    # the path drops everything. Keepalive probes meet the drop: the kernel resets every
    # one (one a poll is using ends at its deadline), none is left hanging. Once the path
    # heals the pools pass over their reset sessions, as over server-ended ones
    # (ADR-0148, test_a_quiet_workers_idle_sessions_killed_cost_no_task): no write meets
    # one, no claim is lost. Every task ends done, claimed once.
    quiet = workers(path.url(**QUICK_KEEPALIVES), "quiet", concurrency=3, prefix=path.command())
    await run_a_first_task(store, tmp_path)
    assert len(path.established()) >= 6  # the pools', the claims', the LISTENs'
    path.drop()

    async def all_reset() -> bool:
        return not path.established()

    # Keepalive's 3 s for each idle one, the 10 s deadline for one a poll is using: a
    # bound, not a benchmark. Without keepalives the idle ones stay established for hours.
    await until(all_reset, "every connection through the dropped path is reset", within=40)
    path.heal()
    for n in range(6):
        await add_task(store, tmp_path, f"t{n}", {"text": f"answer {n}"})

    async def all_done() -> bool:
        return all([await status_of(store, f"t{n}") == "done" for n in range(6)])

    await until(all_done, "every task of the burst is done through the healed path", within=60)
    quiet.signal(signal.SIGTERM)
    assert await quiet.exit_code() == 0
    assert quiet.log().count("claimed task") == 7  # each claimed once
    assert "claim lost" not in quiet.log()
    assert "took over task" not in quiet.log()
    for n in range(6):
        assert (await log_types(store, f"t{n}")).count("TaskFinished") == 1


async def test_an_append_whose_reply_is_dropped_is_a_lost_claim_and_nothing_is_lost(
    store: Store,
    postgres_url: str,
    path: DroppingPath,
    tmp_path: Path,
    workers: Callable[..., WorkerProcess],
) -> None:
    # SPEC §3: a write in flight when its connection is forgotten by the path. The append
    # (its ModelCalled) waits in the server on a row lock the test holds; the path drops
    # every packet of the connections open now; the lock goes and the server commits, but
    # the reply never arrives. With noeta's own keepalives (a minute idle) the deadline
    # ends the wait: CommitUnknown, the claim treated as lost, never a wrong answer. New
    # connections pass: the worker keeps word that the call was not sent, then takes the
    # task over once its lease lapsed, reads the append that landed and finishes the task.
    # ADR-0152: that deadline replaced the worker's other connections, all forgotten with
    # it, so its next claim and its adoption wait out no deadline of their own: done
    # within 2 deadlines of the drop (it took 3, 31-32 s, when each paid its own).
    await add_task(store, tmp_path, "t", {"text": "after the drop"})
    worker = workers(
        path.url(),
        "victim",
        lease=LONG_LEASE,
        concurrency=1,
        failpoints="append.before_commit=pause@1",
        prefix=path.command(),
    )
    await until(worker.paused, "the worker freezes before its first append")
    async with an_append_waiting_on_its_row(postgres_url, worker) as (blocker, _, _):
        assert path.forget()
        started = asyncio.get_running_loop().time()
        blocker.rollback()  # the append commits in the server; its reply is dropped

    async def noticed() -> bool:
        return "task t: claim lost (" in worker.log()

    await until(noticed, "the worker's deadline ends the wait: the claim is lost", within=60)
    waited = asyncio.get_running_loop().time() - started
    # The 10 s deadline (its keep may meet one more): not TCP's 15 minutes of retransmits,
    # nor the 90 s noeta's keepalives take. A bound, not a benchmark.
    assert waited < 45, waited
    assert "may or may not have landed" in worker.log()
    assert "ModelCalled" in await log_types(store, "t")  # it landed, unseen
    assert await lapse_the_lease(postgres_url, "t") == 1

    async def done() -> bool:
        return await status_of(store, "t") == "done"

    await until(done, "the task is taken over and finished", within=60)
    finished = asyncio.get_running_loop().time() - started
    assert finished < 2 * DEFAULT_DEADLINE_SECONDS, finished
    assert worker.log().count(REPLACED) == 1
    assert "took over task t (epoch 2)" in worker.log()
    types = await log_types(store, "t")
    assert types.count("TaskFinished") == 1, types


async def test_an_idle_worker_whose_path_forgets_it_wakes_for_a_new_task_within_a_deadline(
    store: Store,
    path: DroppingPath,
    tmp_path: Path,
    workers: Callable[..., WorkerProcess],
) -> None:
    # ADR-0152: an idle worker waits on its LISTEN, refreshing its registration and its
    # presence (every half and third of its 1 s lease); the path forgets every connection
    # open, so the new task's NOTIFY is lost with them. The first refresh to wait out its
    # deadline replaces the pools' connections and the LISTENs: the worker listens again,
    # looks ("*"), and runs the task within 2 deadlines of the drop. Before, each
    # forgotten connection it reached for cost a deadline, and the LISTEN stayed
    # forgotten until keepalive reset it (90 s); the poll is 5 minutes.
    idle = workers(path.url(), "idle", concurrency=1, poll=300, prefix=path.command())
    await run_a_first_task(store, tmp_path)
    assert path.forget()
    started = asyncio.get_running_loop().time()
    await add_task(store, tmp_path, "t", {"text": "after the forget"})

    async def done() -> bool:
        return await status_of(store, "t") == "done"

    await until(done, "the idle worker wakes and runs the new task", within=120)
    woke = asyncio.get_running_loop().time() - started
    assert woke < 2 * DEFAULT_DEADLINE_SECONDS, woke
    assert REPLACED in idle.log()
    assert idle.log().count("claimed task t ") == 1
    assert (await log_types(store, "t")).count("TaskFinished") == 1
