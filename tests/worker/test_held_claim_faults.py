"""An idle worker's claim held open for its run's first write (ADR-0136), under real
faults between the claim and that write: a worker SIGKILLed there, or frozen there
(SIGSTOP) past PostgreSQL's `idle_in_transaction_session_timeout`, never claimed the
task: another worker takes it at once, its lease of ten minutes not waited out, and the
frozen worker, continued, neither says it claimed the task nor writes to it."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

from noeta.core.ports.store import Store

from .conftest import WorkerProcess, add_task, log_types, status_of, until

# Never lapses during a test: only the claim's undoing can free the task.
LONG_LEASE = 600


async def held_then(
    store: Store,
    postgres_url: str,
    tmp_path: Path,
    workers: Callable[..., WorkerProcess],
    action: str,
) -> WorkerProcess:
    """A worker that ran a first task (its claims then plain: ADR-0101's form) takes `t`
    idle, holds its claim open, and hits `claim.held=action` before its run starts."""
    await add_task(store, tmp_path, "warm", {"text": "warm"})
    worker = workers(postgres_url, "held", lease=LONG_LEASE, failpoints=f"claim.held={action}@1")

    async def warm_done() -> bool:
        return await status_of(store, "warm") == "done"

    await until(warm_done, "the worker finishes its first task", within=60)
    await add_task(store, tmp_path, "t", {"text": "taken"})
    return worker


async def taken_by_another(
    store: Store, postgres_url: str, workers: Callable[..., WorkerProcess]
) -> WorkerProcess:
    heir = workers(postgres_url, "heir", lease=LONG_LEASE)

    async def done() -> bool:
        return await status_of(store, "t") == "done"

    await until(done, "another worker finishes the task", within=60)
    return heir


async def test_a_worker_killed_while_its_claim_is_held_never_claimed_the_task(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    doomed = await held_then(store, postgres_url, tmp_path, workers, "kill")
    assert await doomed.exit_code(within=60) == -signal.SIGKILL
    assert await status_of(store, "t") == "ready"  # its claim rolled back with its session
    await taken_by_another(store, postgres_url, workers)
    assert (await store.get_task("t")).owner_epoch == 1  # type: ignore[union-attr]
    assert "claimed task t" not in doomed.log()


async def test_a_worker_frozen_while_its_claim_is_held_loses_it_to_postgresql(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    frozen = await held_then(store, postgres_url, tmp_path, workers, "pause")
    await until(frozen.paused, "the worker freezes with its claim held", within=60)
    heir = await taken_by_another(store, postgres_url, workers)
    frozen.signal(signal.SIGCONT)

    async def said_so() -> bool:
        return "task t:" in frozen.log()

    await until(said_so, "the continued worker finds its run's write lost", within=60)
    assert "claimed task t" not in frozen.log()
    assert "claimed task t (epoch 1)" in heir.log()
    types = await log_types(store, "t")
    assert types.count("PluginsPinned") == 1 and types[-1] == "TaskFinished", types
