"""The contract for claims by capability (ADR-0091): a task needs the plugins it has
pinned, by name, and a claimer takes only the tasks whose needs it offers."""

from __future__ import annotations

import pytest

from noeta.core.ports.pin import Pin
from noeta.core.ports.queue_settings import QueueChange, queue_settings_store
from noeta.core.ports.store import NewEvent, NewTask, Store
from noeta.core.rules import events
from noeta.testing.store_contract.fixtures import LEASE


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
