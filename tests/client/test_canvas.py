"""Celery's canvas on plain jobs (ADR-0104): chain, group, chord and their nesting, a
member failing (with and without ignore_errors), cancels both ways, on both stores, run
by one real worker process per store (shared by the module's tests: each uses its own
ids and reads only its own ledger lines)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from noeta.client import AsyncClient
from noeta.client.canvas import chain, chord, group
from noeta.core.errors import TaskCancelled, TaskFailed
from noeta.core.rules.replay import replay
from noeta.testing import postgres
from tests.cli.test_run import noeta
from tests.client import canvas_jobs
from tests.client.canvas_jobs import add, boom, mul, tsum
from tests.worker.conftest import WorkerProcess, until

IDLE = "noeta_wake_0000c0de"  # an idle worker's channel, registered by the test
CONFIG = "plugins:\n  - module: tests.client.canvas_jobs\n"


@dataclass
class Running:
    url: str
    folder: Path
    ledger: Path
    config: Path
    worker: WorkerProcess

    def lines(self) -> list[str]:
        return self.ledger.read_text().splitlines() if self.ledger.exists() else []


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def running(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Running]:
    folder = tmp_path_factory.mktemp(f"canvas-{request.param}")
    if request.param == "sqlite":
        url = f"sqlite:///{folder / 'noeta.db'}"
    else:
        server: postgres.TestPostgres = request.getfixturevalue("postgres_server")
        url = server.new_migrated_schema()
    config = folder / "noeta.yaml"
    config.write_text(CONFIG)
    ledger = folder / "ledger"
    env = {"NOETA_CONFIG": str(config), "NOETA_TEST_LEDGER": str(ledger)}
    worker = WorkerProcess(
        url, "canvas", folder, env=env, poll=0.1, concurrency=8, lease=30, queues="default,parked"
    )
    yield Running(url, folder, ledger, config, worker)
    worker.stop()


@pytest.fixture
async def client(running: Running) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(running.url, config=str(running.config)) as client:
        yield client


async def test_a_chain_passes_each_result_to_the_next_member(client: AsyncClient) -> None:
    handle = await client.canvas(chain(add.s(1, 2), add.s(3), mul.s(10)))
    assert await client.job_result(handle, timeout=60) == 60  # ((1 + 2) + 3) * 10


@pytest.mark.parametrize("store_kind", ["sqlite", "postgres"])
async def test_a_chains_worker_continues_each_link_in_the_slot_it_ran_the_last_in(
    request: pytest.FixtureRequest, tmp_path: Path, store_kind: str
) -> None:
    """ADR-0109: a member's finish makes its canvas claimable and the canvas's step makes
    the next member; the worker that ran the one claims the other by name, in the same
    slot. With one slot, the claim loop gets none while the chain runs, so every link
    after the first claim is a continuation, whatever wakes the loop. And neither calls
    an idle worker (ADR-0117): one registered before the chain runs is never called; each
    member is created started by the step's append, with no claim of its own, and the
    canvas is claimed by its member's finishing commit (ADR-0121)."""
    if store_kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'noeta.db'}"
    else:
        server: postgres.TestPostgres = request.getfixturevalue("postgres_server")
        url = server.new_migrated_schema()
    config = tmp_path / "noeta.yaml"
    config.write_text(CONFIG)
    env = {"NOETA_CONFIG": str(config), "NOETA_TEST_LEDGER": str(tmp_path / "ledger")}
    async with AsyncClient(url, config=str(config)) as client:
        handle = await client.canvas(chain(add.s(1, 1), add.s(1), add.s(1)))
        idle = (await client.store()).capabilities.idle_workers
        if idle is not None:  # another worker, idle: what would a link call it for?
            await idle.wait_idle(IDLE, ["default"], 600)
        worker = WorkerProcess(url, "one-slot", tmp_path, env=env, concurrency=1, lease=30)
        try:
            assert await client.job_result(handle, timeout=60) == 4
        finally:
            worker.stop()
    if idle is not None:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
            registered = await (await admin.execute("SELECT channel FROM idle_workers")).fetchall()
        assert (IDLE,) in registered  # never called: each link continued without it
    log = worker.log().splitlines()
    continued = [line.split("continued with task ")[1] for line in log if "continued with" in line]
    canvas = handle.id
    member = "started as created (epoch 1)"  # by the step's own append (ADR-0117)
    step = "claimed with the finish"  # by the member's finishing commit (ADR-0121)
    # Each step's claim read only the log after the state its worker kept (ADR-0122).
    assert continued == [
        *(f"{canvas}.m0.1, {member}", f"{canvas}, {step} (epoch 2, its log read after seq 4)"),
        *(f"{canvas}.m1.1, {member}", f"{canvas}, {step} (epoch 3, its log read after seq 6)"),
        *(f"{canvas}.m2.1, {member}", f"{canvas}, {step} (epoch 4, its log read after seq 8)"),
    ]
    assert next(line for line in log if "claimed task" in line).endswith(f"{canvas} (epoch 1)")
    assert sum("claimed task" in line for line in log) == 1


async def test_a_canvas_claimed_by_a_finish_whose_outcome_is_unknown_is_adopted(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """ADR-0122: the reply of the member's finish that claimed its canvas is lost (the
    commit landed): the canvas is the worker's, held for a ten-minute lease. The worker
    adopts it at once instead, and the chain ends well inside that lease."""
    server: postgres.TestPostgres = request.getfixturevalue("postgres_server")
    url = server.new_migrated_schema()
    config = tmp_path / "noeta.yaml"
    config.write_text(CONFIG)
    env = {"NOETA_CONFIG": str(config), "NOETA_TEST_LEDGER": str(tmp_path / "ledger")}
    lost = "append_and_claim.after_commit=raise(CommitUnknown)@1"
    async with AsyncClient(url, config=str(config)) as client:
        handle = await client.canvas(chain(add.s(1, 1), add.s(1)))
        worker = WorkerProcess(
            url, "lost-reply", tmp_path, env=env, concurrency=1, lease=600, failpoints=lost
        )
        try:
            assert await client.job_result(handle, timeout=90) == 3
        finally:
            worker.stop()
    assert f"adopted task {handle.id} (epoch 2)" in worker.log()


async def test_a_group_returns_its_results_in_order(client: AsyncClient) -> None:
    handle = await client.canvas(group(add.s(n, n) for n in range(6)))
    assert await client.job_result(handle, timeout=60) == [0, 2, 4, 6, 8, 10]


async def test_a_chord_runs_its_callback_once_with_every_result(
    client: AsyncClient, running: Running
) -> None:
    handle = await client.canvas(chord(group(add.s(n, 100) for n in range(5)), tsum.s()))
    assert await client.job_result(handle, timeout=60) == 510
    assert running.lines().count("tsum [100, 101, 102, 103, 104]") == 1
    children = await client.children(handle)
    assert [record.status.value for _, record in children] == ["done"] * 6
    shown = await asyncio.to_thread(noeta, "show", handle.id, store=running.url)
    assert shown.returncode == 0, shown.stderr
    assert "canvas\n" in shown.stdout and "chord(group(add x5), tsum)" in shown.stdout
    for _, member in children:
        assert f"subtask {member.id}  done" in shown.stdout
    store = await client.store()  # `noeta replay` follows the canvas and its members
    for task_id in [handle.id, *(member.id for _, member in children)]:
        assert replay(await store.read_log(task_id)) is None, task_id


async def test_canvases_nest_a_chain_of_groups_and_a_chord_of_chains(
    client: AsyncClient,
) -> None:
    of_groups = chain(group(add.s(1, 1), add.s(2, 2)), tsum.s(), add.s(1))
    of_chains = chord([chain(add.s(3, 3), add.s(1)), chain(add.s(4, 4), mul.s(2))], tsum.s())
    # Deeper than the subtask depth limit (3): a canvas's nesting is one task's data.
    deep = chain(add.s(0, 1), chain(add.s(1), chain(add.s(1), chain(add.s(1), add.s(1)))))
    handles = [await client.canvas(c) for c in (of_groups, of_chains, deep)]
    results = [await client.job_result(h, timeout=60) for h in handles]
    assert results == [7, 7 + 16, 5]


async def test_a_failed_member_fails_the_chain_with_its_error(
    client: AsyncClient, running: Running
) -> None:
    handle = await client.canvas(chain(add.s(20, 1), boom.s(), add.s(1000)))
    with pytest.raises(TaskFailed) as failed:
        await client.job_result(handle, timeout=60)
    assert "member m1 (boom) failed" in failed.value.error
    assert "boom on 21" in failed.value.error
    assert "add 21 1000" not in running.lines()  # what follows a failure never runs


async def test_a_chord_whose_callback_raises_fails_once(
    client: AsyncClient, running: Running
) -> None:
    handle = await client.canvas(chord(group(add.s(30, 1), add.s(30, 2)), boom.s()))
    with pytest.raises(TaskFailed) as failed:
        await client.job_result(handle, timeout=60)
    assert "member m2 (boom) failed" in failed.value.error
    assert running.lines().count("boom [31, 32]") == 1


async def test_ignore_errors_makes_a_failure_a_result(client: AsyncClient) -> None:
    handle = await client.canvas(group(add.s(40, 1), boom.s(40).set(ignore_errors=True)))
    result = await client.job_result(handle, timeout=60)
    assert isinstance(result, list)
    assert result[0] == 41
    assert isinstance(result[1], dict)
    assert "boom on 40" in str(result[1]["error"])


async def test_a_signature_used_twice_is_two_members(client: AsyncClient, running: Running) -> None:
    twice = add.s(50, 5)
    handle = await client.canvas(chord(group(twice, twice), tsum.s()))
    assert await client.job_result(handle, timeout=60) == 110
    assert running.lines().count("add 50 5") == 2


async def test_a_cancelled_canvas_cancels_its_members(
    client: AsyncClient, running: Running
) -> None:
    # Its members wait in a paused queue until the canvas is cancelled.
    await client.set_queue("parked", paused=True)
    parked = group(add.s(60, 1).set(queue="parked"), add.s(60, 2).set(queue="parked"))
    handle = await client.canvas(chord(parked, tsum.s()))
    await until(lambda: _launched(client, handle.id, 2), "both members launched")
    assert await client.cancel(handle)
    with pytest.raises(TaskCancelled):
        await client.job_result(handle, timeout=60)
    await client.set_queue("parked", paused=False)
    for _, member in await client.children(handle):
        with pytest.raises(TaskCancelled):
            await client.result(member.id, timeout=60)
    assert not [line for line in running.lines() if line.startswith("add 60")]


async def test_a_member_cancelled_while_the_chord_waits_fails_it(
    client: AsyncClient, running: Running
) -> None:
    await client.set_queue("parked", paused=True)
    header = group(add.s(70, 1), add.s(70, 2).set(queue="parked"))
    handle = await client.canvas(chord(header, tsum.s()))
    await until(lambda: _launched(client, handle.id, 2), "both members launched")
    parked = [m for _, m in await client.children(handle) if m.queue == "parked"]
    assert await client.cancel(parked[0].id)
    await client.set_queue("parked", paused=False)
    with pytest.raises(TaskFailed) as failed:
        await client.job_result(handle, timeout=60)
    assert "member m1 (add) cancelled" in failed.value.error
    assert not [line for line in running.lines() if line.startswith("tsum [71")]


async def test_a_chain_in_a_queue_with_settings_runs_its_members_claimed_as_any_task(
    client: AsyncClient, running: Running
) -> None:
    """ADR-0117's fallback: a step's append that would create its next member started in a
    queue with settings is refused whole (NotStarted); the runner appends again without
    starting it, and the member is claimed as any task is, under the queue's limits."""
    await client.set_queue("parked", concurrency=8, paused=False)
    links = (add.s(80, 1), add.s(1), add.s(1))
    handle = await client.canvas(chain(*(link.set(queue="parked") for link in links)))
    assert await client.job_result(handle, timeout=60) == 83
    assert [line for line in running.lines() if line.startswith("add 8")] == [
        "add 80 1", "add 81 1", "add 82 1"
    ]  # fmt: skip
    started = [line for line in running.worker.log().splitlines() if "started as created" in line]
    assert not [line for line in started if handle.id in line]  # each claimed, none created so


async def _launched(client: AsyncClient, canvas: str, count: int) -> bool:
    return len(await client.children(canvas)) >= count


assert canvas_jobs and asyncio  # imported: its functions are what the canvases name
