"""Shared model-call limits with real `noeta worker` processes and a rate-limited fake
provider at the wire (ADR-0075): the whole fleet slows to the limit set with `noeta
limit set`, no task fails, and a 429's Retry-After holds every worker off."""

from __future__ import annotations

import os
from collections.abc import Callable

import psycopg

from noeta.core.ports.model_limits import ModelLimiter
from noeta.core.ports.store import NewEvent, NewTask, Store
from noeta.core.rules import events
from noeta.testing.command_line import run_in_process
from noeta.testing.fake_providers import FakeAnthropic, HttpError, Reply

from .conftest import WorkerProcess, status_of, until

MODEL = "fake-model"


def limit_set(url: str, *arguments: str) -> None:
    # not --store: it holds a password
    result = run_in_process(["limit", "set", *arguments], {**os.environ, "NOETA_STORE": url})
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
        assert await calls_not_cut(store, task_id) == 1
    return fleet


async def calls_not_cut(store: Store, task_id: str) -> int:
    """The task's ModelCalled events less those a claimer found cut because their worker
    lost its claim or their call: on a loaded machine a 1 s lease can lapse mid-call, and
    the re-send is recovery, not a refused call. A refused call that wrote ModelCalled
    would be cut "not_sent", or not at all, and still counts."""
    log = await store.read_log(task_id)
    called = sum(1 for e in log if e.type == "ModelCalled")
    cuts = [events.decode(e.type, e.data) for e in log if e.type == "ModelCallCut"]
    lost = [c for c in cuts if isinstance(c, events.ModelCallCut) and c.cause != "not_sent"]
    return called - len(lost)


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
    throttled = [t for t, status in provider.arrivals if status == 429]
    assert len(throttled) <= 3, throttled
    # The store's clock: each ModelCalled is recorded at the moment its call was weighed,
    # at or after the slot its budget gave it, and the slots are 100 ms apart from the
    # first call's (ADR-0075's GCRA, no burst; weighed once the limit rows are held, 0033),
    # so the k-th call is recorded at least k x 100 ms after the first.
    # The wire cannot show this on a loaded machine: a worker whose loop stalled sends
    # the calls it was allowed late, all at once. A fleet that ignored the limit records
    # a dozen calls in its first 100 ms.
    called = await called_at(store, ids)
    late = [k for k, at in enumerate(called) if at - called[0] < k * 0.1 - 0.001]
    assert not late, [called[k] - called[0] for k in late]
    # Every request sent was recorded first (a re-send after a cut is a call of its own).
    assert 60 <= len(provider.arrivals) - len(throttled) <= len(called)
    assert isinstance(store, ModelLimiter)
    (limit,) = await store.model_limits()
    assert limit.calls == len(called) and limit.handbacks > 0 and limit.waited_seconds > 0
    logs = "".join(worker.log() for worker in fleet)
    assert f"waiting for model budget anthropic/{MODEL} until" in logs


async def test_a_429_retry_after_holds_off_every_worker(
    store: Store, postgres_url: str, workers: Callable[..., WorkerProcess]
) -> None:
    # The limit spaces the calls 100 ms apart, so the 40 take at least four seconds and
    # some are still to come when the provider answers the fifth request 429.
    limit_set(postgres_url, f"anthropic/{MODEL}", "--rpm", "600")
    ids = await add_tasks(store, 40)
    with FakeAnthropic() as provider:
        provider.script(*[Reply()] * 4, HttpError(429, retry_after="4"))
        await run_fleet(store, postgres_url, provider, workers, ids)
    assert isinstance(store, ModelLimiter)
    (limit,) = await store.model_limits()
    assert limit.throttled == 1
    # The store records the pause when the worker hears the 429: from then until it ends,
    # no worker's append records a call (its transaction started before the pause, or it
    # was handed back); the call that got the 429 retries itself and records nothing.
    # (`limit list` shows a pause only while it lasts: the row keeps when it ended.)
    with psycopg.connect(postgres_url) as connection:
        row = connection.execute("SELECT paused_until FROM model_limits").fetchone()
    assert row is not None and row[0] is not None
    paused_until = row[0].timestamp()
    called = await called_at(store, ids)
    during = [at for at in called if paused_until - 4 <= at < paused_until]
    assert not during, (paused_until, during)
    after = [at for at in called if at >= paused_until]
    assert after, "every call was recorded before the pause: the test tests nothing"


async def called_at(store: Store, ids: list[str]) -> list[float]:
    """When the store recorded each task's ModelCalled (its clock, in seconds), in order."""
    logs = [await store.read_log(task_id) for task_id in ids]
    return sorted(e.created_at.timestamp() for log in logs for e in log if e.type == "ModelCalled")
