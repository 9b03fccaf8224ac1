"""The contract for claims by capability (ADR-0092): a task needs the plugins it has
pinned, by name, and a claimer takes only the tasks whose needs it offers."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta

import pytest

from noeta.core.ports.model_limits import ModelBudget, ModelLimiter
from noeta.core.ports.pin import Pin
from noeta.core.ports.queue_settings import QueueChange, queue_settings_store
from noeta.core.ports.store import Claim, NewEvent, NewTask, Store, Wait
from noeta.core.ports.worker_registry import WorkerEntry, WorkerRegistry
from noeta.core.rules import events
from noeta.testing.store_contract.fixtures import LEASE, SHORT_LEASE, until_store_time


def pinned(*names: str) -> NewEvent:
    pins = tuple(Pin(name, f"module:{name}", "1.0", "0") for name in names)
    return NewEvent(*events.encode(events.PluginsPinned(pins)))


def needing(task_id: str, *names: str, queue: str = "default") -> NewTask:
    """A task created with its pins, as a job is (ADR-0049)."""
    return NewTask(task_id, [NewEvent("created", {"id": task_id}), pinned(*names)], queue=queue)


async def claimed_ids(store: Store, offers: list[str] | None, queue: str = "default") -> set[str]:
    batch = await store.claim_and_load(
        "w", [queue], LEASE, limit=10, snapshot_version="v", offers=offers
    )
    return {each.claim.task_id for each in batch}


def registry_of(store: Store) -> WorkerRegistry:
    registry = store.capabilities.workers
    assert registry is not None
    return registry


# Two pins in one append, the latest with a repeated name: as each append path carries
# an agent task's first pin (ADR-0092).
FIRST_PINS = [pinned("first"), pinned("extra", "core", "extra")]
CALLED = NewEvent("ModelCalled", {"request_hash": "h"})


async def append_by(
    store: Store, path: str, claims: Sequence[Claim], events: Sequence[NewEvent]
) -> None:
    """Append `events` to each claimed task by `path`, then let it go: ready or waiting,
    where `unrunnable` reads what it needs."""
    seqs = [len(await store.read_log(claim.task_id)) for claim in claims]
    if path == "continue":  # the lean append alone, and (PostgreSQL) in a batch
        await asyncio.gather(*map(store.append, claims, seqs, [events] * len(claims)))
    elif path == "wait":  # the full append: the events and the next state in one write
        for claim, seq in zip(claims, seqs, strict=True):
            wait = Wait(until=await store.clock())
            await store.append(claim, seq, events, next_state=wait)
        return
    else:  # with a model call, under a limit of its own (fresh: the call goes now)
        assert isinstance(store, ModelLimiter)
        for claim, seq in zip(claims, seqs, strict=True):
            model = f"fake/{claim.task_id}-{seq}"
            await store.set_model_limit(model, None, 1_000_000)
            budget = ModelBudget((model,), 100)
            await store.append_model_called(claim, seq, [*events, CALLED], budget)
    for claim in claims:
        assert await store.release(claim)


async def claim_each(store: Store, ids: Sequence[str]) -> list[Claim]:
    claims = [await store.claim_task("w", task_id, LEASE) for task_id in ids]
    assert None not in claims
    return [claim for claim in claims if claim is not None]


class CapabilityContract:
    """A claimer never takes a task that needs a plugin it does not offer."""

    async def test_a_claim_takes_only_tasks_whose_needs_it_offers(self, store: Store) -> None:
        await store.create_task(needing("a", "jobs_a"))
        await store.create_task(needing("b", "jobs_b"))
        await store.create_task(needing("ab", "jobs_b", "jobs_a"))
        await store.create_task(needing("free"))  # pinned nothing: anyone
        assert await claimed_ids(store, ["jobs_a", "other"]) == {"a", "free"}
        assert await claimed_ids(store, ["jobs_c"]) == set()
        assert await claimed_ids(store, ["jobs_a", "jobs_b"]) == {"b", "ab"}

    async def test_a_claimer_offering_anything_takes_everything(self, store: Store) -> None:
        await store.create_task(needing("a", "jobs_a"))
        await store.create_task(needing("b", "jobs_b"))
        assert await claimed_ids(store, None) == {"a", "b"}

    async def test_needs_follow_the_latest_pin(self, store: Store) -> None:
        """An agent task pins at its first claim: its needs are what that claimer had."""
        await store.create_task(needing("t"))
        claim = await store.claim_task("w", "t", LEASE, offers=["core"])
        assert claim is not None
        await store.append(claim, 2, [pinned("core", "extra")])
        assert await store.release(claim)
        assert await claimed_ids(store, ["core"]) == set()
        assert await claimed_ids(store, ["core", "extra"]) == {"t"}

    @pytest.mark.parametrize("path", ["continue", "wait", "model_call"])
    async def test_a_first_pin_records_the_latest_pins_names_whichever_append_carries_it(
        self, store: Store, path: str
    ) -> None:
        """An agent task pins with its first append: its needs are the names of the
        latest pin the append carries, sorted, each once; an append pinning nothing keeps
        them, and a pin of no plugin needs nothing (any worker)."""
        ids = ["a", "b", "c"]  # three at once: PostgreSQL batches lean appends
        for task_id in ids:
            await store.create_task(needing(task_id))
        await append_by(store, path, await claim_each(store, ids), FIRST_PINS)
        registry = registry_of(store)
        pinned_by_all = {task_id: ("core", "extra") for task_id in ids}
        assert await registry.unrunnable(ids) == pinned_by_all
        await append_by(store, path, await claim_each(store, ["a"]), [NewEvent("noted", {})])
        assert await registry.unrunnable(ids) == pinned_by_all
        await append_by(store, path, await claim_each(store, ["a"]), [pinned()])
        del pinned_by_all["a"]
        assert await registry.unrunnable(ids) == pinned_by_all

    async def test_the_named_claim_checks_the_needs(self, store: Store) -> None:
        await store.create_task(needing("a", "jobs_a"))
        assert await store.claim_task("w", "a", LEASE, offers=["jobs_b"]) is None
        claim = await store.claim_task("w", "a", LEASE, offers=["jobs_a"])
        assert claim is not None and claim.task_id == "a"

    @pytest.mark.parametrize(
        "change", [QueueChange(concurrency=5), QueueChange(per_key_concurrency=5)]
    )
    async def test_a_queue_with_settings_takes_only_what_is_offered(
        self, store: Store, change: QueueChange
    ) -> None:
        await queue_settings_store(store).set_queue("q", change)
        await store.create_task(needing("a", "jobs_a", queue="q"))
        await store.create_task(needing("b", "jobs_b", queue="q"))
        assert await claimed_ids(store, ["jobs_b"], "q") == {"b"}
        assert await claimed_ids(store, ["jobs_b"], "q") == set()
        assert await claimed_ids(store, ["jobs_a"], "q") == {"a"}

    async def test_the_registry_holds_the_live_workers(self, store: Store) -> None:
        registry = registry_of(store)
        await registry.record_worker(WorkerEntry("w1", ("q",), ("jobs_a",)), LEASE)
        await registry.record_worker(WorkerEntry("w2", ("q", "r"), None), LEASE)
        await registry.record_worker(WorkerEntry("w1", ("q",), ("jobs_a", "jobs_b")), LEASE)
        live = await registry.live_workers()
        assert [(w.id, w.queues, w.offers) for w in live] == [
            ("w1", ("q",), ("jobs_a", "jobs_b")),
            ("w2", ("q", "r"), None),
        ]
        assert all(w.last_seen is not None for w in live)
        await registry.worker_stopped(WorkerEntry("w2", ("q", "r"), None))
        assert [w.id for w in await registry.live_workers()] == ["w1"]

    async def test_a_task_no_live_worker_can_run_is_reported(self, store: Store) -> None:
        registry = registry_of(store)
        await store.create_task(needing("a", "jobs_a", queue="q"))
        await store.create_task(needing("b", "jobs_b", queue="q"))
        await store.create_task(needing("free", queue="q"))
        everything = ["a", "b", "free", "missing"]
        assert await registry.unrunnable(everything) == {"a": ("jobs_a",), "b": ("jobs_b",)}
        await registry.record_worker(WorkerEntry("w1", ("q",), ("jobs_a",)), LEASE)
        await registry.record_worker(WorkerEntry("w2", ("other",), ("jobs_b",)), LEASE)
        assert await registry.unrunnable(everything) == {"b": ("jobs_b",)}
        await registry.record_worker(WorkerEntry("w3", ("q",), ("jobs_b",)), SHORT_LEASE)
        assert await registry.unrunnable(everything) == {}
        await until_store_time(store, (await store.clock()) + timedelta(seconds=SHORT_LEASE))
        assert await registry.unrunnable(everything) == {"b": ("jobs_b",)}
        claim = await store.claim_task("w", "a", LEASE, offers=["jobs_a"])
        assert claim is not None
        await registry.worker_stopped(WorkerEntry("w1", ("q",), ("jobs_a",)))
        assert await registry.unrunnable(everything) == {"b": ("jobs_b",)}  # a runs

    async def test_overdue_tasks_are_those_no_live_worker_ran_in_time(self, store: Store) -> None:
        registry = registry_of(store)
        await store.create_task(needing("a", "jobs_a", queue="q"))
        await store.create_task(needing("b", "jobs_b", queue="q"))
        await store.create_task(needing("free", queue="q"))
        await store.create_task(needing("elsewhere", "jobs_b", queue="other"))
        await registry.record_worker(WorkerEntry("w1", ("q",), ("jobs_a",)), LEASE)
        assert await registry.overdue(["q"], 3600) == []  # not due that long
        assert await registry.overdue(["q"], 0) == ["b"]
        assert await registry.overdue(["q", "other"], 0) == ["b", "elsewhere"]
