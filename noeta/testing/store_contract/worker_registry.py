"""The contract for the registry of workers (ADR-0100): what a worker reports of itself,
a name one live run holds, the dead and the stopped kept for a while, then deleted."""

from __future__ import annotations

from datetime import datetime, timedelta

from noeta.core.ports.store import Store
from noeta.core.ports.worker_registry import Heartbeat, WorkerEntry, WorkerRegistry
from noeta.testing.store_contract.fixtures import LEASE, SHORT_LEASE, until_store_time


def registry_of(store: Store) -> WorkerRegistry:
    registry = store.capabilities.workers
    assert registry is not None
    return registry


def run_of(name: str, instance: str, **reported: object) -> WorkerEntry:
    """A worker's run as it reports itself."""
    fields: dict[str, object] = {
        "host": "host-a",
        "pid": 4242,
        "version": "1.2.3",
        "concurrency": 4,
        **reported,
    }
    return WorkerEntry(name, ("q", "r"), ("jobs_a",), instance=instance, **fields)  # type: ignore[arg-type]


async def listed(store: Store, departed: bool = False) -> dict[str, WorkerEntry]:
    return {w.id: w for w in await registry_of(store).listed_workers(departed)}


class WorkerRegistryContract:
    async def test_a_worker_reports_itself_and_its_counts(self, store: Store) -> None:
        registry = registry_of(store)
        assert await registry.record_worker(run_of("w1", "i1"), LEASE) == Heartbeat()
        first = (await listed(store))["w1"]
        assert (first.host, first.pid, first.version, first.concurrency) == (
            "host-a",
            4242,
            "1.2.3",
            4,
        )
        assert (first.queues, first.offers, first.state) == (("q", "r"), ("jobs_a",), "live")
        assert (first.processed, first.failed) == (0, 0)
        assert first.started_at is not None and first.last_seen is not None
        await registry.record_worker(run_of("w1", "i1", processed=7, failed=2), LEASE)
        again = (await listed(store))["w1"]
        assert (again.processed, again.failed) == (7, 2)
        assert again.started_at == first.started_at
        assert again.last_seen is not None and again.last_seen > first.last_seen

    async def test_a_name_a_live_run_holds_is_refused_to_another(self, store: Store) -> None:
        registry = registry_of(store)
        await registry.record_worker(run_of("w1", "i1", processed=3), LEASE)
        refused = await registry.record_worker(run_of("w1", "i2", pid=99, host="b"), LEASE)
        assert refused.held_by is not None
        assert (refused.held_by.pid, refused.held_by.host) == (4242, "host-a")
        assert refused.held_by.instance == "i1"
        assert refused.clock is not None and refused.clock >= first_seen(refused)
        kept = (await listed(store))["w1"]
        assert (kept.instance, kept.pid, kept.processed) == ("i1", 4242, 3)
        await registry.worker_stopped(run_of("w1", "i2"))  # not its row: nothing happens
        assert (await listed(store))["w1"].state == "live"

    async def test_a_stopped_worker_is_kept_with_its_counts(self, store: Store) -> None:
        registry = registry_of(store)
        await registry.record_worker(run_of("w1", "i1"), LEASE)
        await registry.record_worker(run_of("w2", "i2"), LEASE)
        await registry.worker_stopped(run_of("w1", "i1", processed=5, failed=1))
        assert [w.id for w in await registry.live_workers()] == ["w2"]
        assert list(await listed(store)) == ["w2"]
        stopped = (await listed(store, departed=True))["w1"]
        assert (stopped.state, stopped.processed, stopped.failed) == ("stopped", 5, 1)
        # A new run may take the name of a stopped one: it starts afresh.
        taken = await registry.record_worker(run_of("w1", "i3", pid=7), LEASE)
        assert taken.held_by is None and taken.revived_from is None
        fresh = (await listed(store))["w1"]
        assert (fresh.instance, fresh.pid, fresh.processed, fresh.state) == ("i3", 7, 0, "live")
        assert fresh.started_at is not None and stopped.started_at is not None
        assert fresh.started_at > stopped.started_at

    async def test_a_silent_worker_is_dead_and_its_next_round_revives_it(
        self, store: Store
    ) -> None:
        registry = registry_of(store)
        await registry.record_worker(run_of("w1", "i1"), SHORT_LEASE)
        seen = (await listed(store))["w1"].last_seen
        assert seen is not None
        await until_store_time(store, seen + timedelta(seconds=SHORT_LEASE))
        assert await registry.live_workers() == []
        assert await listed(store) == {}
        dead = (await listed(store, departed=True))["w1"]
        assert dead.state == "dead" and dead.last_seen == seen
        back = await registry.record_worker(run_of("w1", "i1"), LEASE)
        assert back == Heartbeat(revived_from="dead", last_seen=seen)
        assert (await listed(store))["w1"].state == "live"
        assert await registry.record_worker(run_of("w1", "i1"), LEASE) == Heartbeat()

    async def test_a_dead_workers_name_goes_to_a_new_run(self, store: Store) -> None:
        registry = registry_of(store)
        await registry.record_worker(run_of("w1", "i1", processed=9), SHORT_LEASE)
        seen = (await listed(store))["w1"].last_seen
        assert seen is not None
        await until_store_time(store, seen + timedelta(seconds=SHORT_LEASE))
        taken = await registry.record_worker(run_of("w1", "i2"), LEASE)
        assert taken == Heartbeat()  # another run: not a revival
        fresh = (await listed(store))["w1"]
        assert (fresh.instance, fresh.processed, fresh.state) == ("i2", 0, "live")

    async def test_departed_workers_are_deleted_by_another_workers_round(
        self, store: Store
    ) -> None:
        registry = registry_of(store)
        await registry.record_worker(run_of("gone", "i1"), SHORT_LEASE)
        await registry.record_worker(run_of("left", "i2"), LEASE)
        await registry.worker_stopped(run_of("left", "i2"))
        seen = (await listed(store, departed=True))["gone"].last_seen
        assert seen is not None
        await until_store_time(store, seen + timedelta(seconds=SHORT_LEASE))
        await registry.record_worker(run_of("other", "i3"), LEASE)
        assert set(await listed(store, departed=True)) == {"gone", "left", "other"}
        await registry.record_worker(run_of("other", "i3"), LEASE, departed_kept_seconds=0)
        assert set(await listed(store, departed=True)) == {"other"}


def first_seen(found: Heartbeat) -> datetime:
    assert found.held_by is not None and found.held_by.last_seen is not None
    return found.held_by.last_seen
