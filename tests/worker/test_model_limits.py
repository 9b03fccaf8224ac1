"""Shared model-call limits with real `noeta worker` processes and a rate-limited fake
provider at the wire (ADR-0075): the whole fleet slows to the limit set with `noeta
limit set`, no task fails, and a 429's Retry-After holds every worker off."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

from noeta.core.ports.model_limits import ModelLimiter
from noeta.core.ports.store import NewEvent, NewTask, Store
from noeta.core.rules import events
from noeta.testing.fake_providers import FakeAnthropic

from .conftest import WorkerProcess, log_types, status_of, until

MODEL = "fake-model"


def limit_set(url: str, *arguments: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "noeta", "limit", "set", *arguments],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NOETA_STORE": url},  # not --store: it holds a password
        check=False,
    )
    assert result.returncode == 0, result.stderr


async def add_tasks(store: Store, count: int) -> list[str]:
    ids = [f"t{n:03}" for n in range(count)]
    for task_id in ids:
        created = events.TaskCreated(model=f"anthropic:{MODEL}", prompt="hello", tools=())
        await store.create_task(NewTask(task_id, [NewEvent(*events.encode(created))]))
    return ids


FLEET_CONCURRENCY = 12  # three workers of 4


async def run_fleet(
    store: Store,
    url: str,
    provider: FakeAnthropic,
    workers: Callable[..., WorkerProcess],
    ids: list[str],
) -> list[WorkerProcess]:
    env = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": provider.base_url}
    names = ("a", "b", "c")
    fleet = [workers(url, name, env=env, concurrency=FLEET_CONCURRENCY // 3) for name in names]

    async def all_finished() -> bool:
        finished = ("done", "failed", "cancelled")
        return all([await status_of(store, task_id) in finished for task_id in ids])

    await until(all_finished, "every task has finished", within=90)
    assert [await status_of(store, task_id) for task_id in ids] == ["done"] * len(ids)
    for task_id in ids:  # one call each: no ModelCalled for a call that was refused
        assert (await log_types(store, task_id)).count("ModelCalled") == 1
    return fleet


async def test_a_fleet_slows_to_the_shared_limit_and_no_task_fails(
    store: Store, postgres_url: str, workers: Callable[..., WorkerProcess]
) -> None:
    limit_set(postgres_url, f"anthropic/{MODEL}", "--rpm", "600")  # 10 a second
    ids = await add_tasks(store, 60)
    with FakeAnthropic() as provider:
        # The provider allows twice the shared limit: the budget spaces the calls on the
        # store's clock, and on a loaded machine a worker can send its request a second
        # after its moment and the next ones on time, so calls bunch at the wire. A fleet
        # that ignored the limit (12 calls at once, 60 in well under a second) would still
        # draw dozens of 429s; the rate the fleet kept is read below at the provider.
        provider.limit_rate(20, retry_after="1")
        fleet = await run_fleet(store, postgres_url, provider, workers, ids)
    times = [t for t, _ in provider.arrivals]
    throttled = [t for t, status in provider.arrivals if status == 429]
    assert len(throttled) <= 3, throttled
    assert len(times) == 60 + len(throttled)
    # The provider's own clock: the fleet slowed to the limit. Each worker's first call
    # arrives late (its HTTP client starts), so the rate is read after the first second.
    # The budget spaces calls on the store's clock; at the wire, a worker whose loop
    # stalled sends the calls it was allowed late, all at once: at most the fleet's
    # concurrency (3 x 4) of them. A fleet at twice the limit still exceeds this bound
    # by far (about 50 calls in 2.5 s against 26 + 12).
    steady = [t for t in times if t >= times[0] + 1.0]
    assert len(steady) - 1 <= 10 * 1.05 * (steady[-1] - steady[0]) + FLEET_CONCURRENCY
    assert times[-1] - times[0] >= 59 * 0.1 * 0.9
    assert isinstance(store, ModelLimiter)
    (limit,) = await store.model_limits()
    assert limit.calls == 60 and limit.handbacks > 0 and limit.waited_seconds > 0
    logs = "".join(worker.log() for worker in fleet)
    assert f"waiting for model budget anthropic/{MODEL} until" in logs


async def test_a_429_retry_after_holds_off_every_worker(
    store: Store, postgres_url: str, workers: Callable[..., WorkerProcess]
) -> None:
    # The limit is set above what the provider allows: its 429s must pause the fleet.
    limit_set(postgres_url, f"anthropic/{MODEL}", "--rpm", "1800")
    ids = await add_tasks(store, 40)
    with FakeAnthropic() as provider:
        provider.limit_rate(10, retry_after="4")
        await run_fleet(store, postgres_url, provider, workers, ids)
    throttled = [t for t, status in provider.arrivals if status == 429]
    assert throttled, "the provider never answered 429: the test tests nothing"
    for at in throttled:
        # The pause holds the fleet off for four seconds from when the store records it.
        # Calls recorded before it may still arrive in that time: on a loaded machine a
        # worker whose loop stalls sends its recorded calls late, up to its concurrency (4)
        # at once; and a second 429 of a burst (a call in flight when the first came) is
        # under the first's pause, which ends a little under four seconds after it. A
        # fleet that ignored the pause keeps calling through this window.
        during = [t for t, _ in provider.arrivals if at + 1.0 < t < at + 3.8]
        assert len(during) <= 4, (at, during)
    assert isinstance(store, ModelLimiter)
    (limit,) = await store.model_limits()
    assert limit.throttled == len(throttled)
