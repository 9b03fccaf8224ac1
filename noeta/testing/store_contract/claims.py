"""The contract for claims and leases: epochs, queues, due order, and claimants racing
in one process and across processes."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import timedelta

import pytest

from noeta.backends.stores import open_store
from noeta.core.errors import ConfigError
from noeta.core.ports.store import (
    NewEvent,
    NewTask,
    Store,
    TaskStatus,
)
from noeta.testing.claim_race import RACE_QUEUE
from noeta.testing.store_contract.fixtures import LEASE, created, eventually_claim


class ClaimContract:
    """Creation, claims and leases; many claimants never share a task."""

    async def test_create_is_idempotent_by_id(self, store: Store) -> None:
        assert await store.create_task(created("a"))
        assert not await store.create_task(NewTask("a", [NewEvent("other", {})]))
        log = await store.read_log("a")
        assert [(e.seq, e.type, e.data) for e in log] == [(1, "created", {"id": "a"})]
        task = await store.get_task("a")
        assert task is not None and task.status is TaskStatus.READY and task.last_seq == 1

    async def test_claim_bumps_the_epoch_and_sets_a_lease(self, store: Store) -> None:
        await store.create_task(created("a"))
        before = await store.clock()
        claim = await store.claim("w1", ["default"], LEASE)
        assert claim is not None and claim.task_id == "a" and claim.epoch == 1
        assert claim.lease_until >= before + timedelta(seconds=LEASE - 1)
        task = await store.get_task("a")
        assert task is not None and task.status is TaskStatus.RUNNING and task.owner == "w1"
        assert await store.claim("w2", ["default"], LEASE) is None

    async def test_claim_task_claims_only_that_task_and_only_when_claimable(
        self, store: Store
    ) -> None:
        await store.create_task(created("a"))
        await store.create_task(created("b"))
        claim = await store.claim_task("w", "b", LEASE)
        assert claim is not None and claim.task_id == "b" and claim.epoch == 1
        assert await store.claim_task("w2", "b", LEASE) is None
        assert await store.claim_task("w", "nope", LEASE) is None
        later = (await store.clock()) + timedelta(hours=1)
        await store.create_task(created("c", ready_at=later))
        assert await store.claim_task("w", "c", LEASE) is None
        other = await store.claim("w", ["default"], LEASE)
        assert other is not None and other.task_id == "a"

    async def test_epochs_strictly_increase(self, store: Store) -> None:
        await store.create_task(created("a"))
        epochs = []
        for _ in range(5):
            claim = await store.claim("w", ["default"], LEASE)
            assert claim is not None
            epochs.append(claim.epoch)
            assert await store.release(claim)
        assert epochs == [1, 2, 3, 4, 5]

    async def test_the_queue_filter(self, store: Store) -> None:
        await store.create_task(created("a", queue="mail"))
        await store.create_task(created("b", queue="build"))
        assert await store.claim("w", ["other"], LEASE) is None
        claim = await store.claim("w", ["build", "other"], LEASE)
        assert claim is not None and claim.task_id == "b"

    async def test_claims_come_in_due_time_order(self, store: Store) -> None:
        now = await store.clock()
        for task_id, seconds_ago in [("late", 1), ("early", 3), ("middle", 2)]:
            await store.create_task(created(task_id, ready_at=now - timedelta(seconds=seconds_ago)))
        order = []
        while (claim := await store.claim("w", ["default"], LEASE)) is not None:
            order.append(claim.task_id)
        assert order == ["early", "middle", "late"]

    async def test_a_future_ready_at_is_not_claimable_until_due(self, store: Store) -> None:
        now = await store.clock()
        await store.create_task(created("later", ready_at=now + timedelta(hours=1)))
        due = now + timedelta(seconds=0.5)
        await store.create_task(created("soon", ready_at=due))
        claim = await eventually_claim(store, "w", ["default"])
        # The lease starts at the moment of the claim, on the store's clock.
        assert claim.task_id == "soon"
        assert claim.lease_until - timedelta(seconds=LEASE) >= due
        assert await store.claim("w", ["default"], LEASE) is None

    async def test_seconds_until_due_tells_an_idle_worker_when_to_look(self, store: Store) -> None:
        assert await store.seconds_until_due(["default"]) is None
        claim = None
        await store.create_task(created("a"))
        claim = await store.claim("w", ["default"], 5)
        assert claim is not None
        until_lapse = await store.seconds_until_due(["default"])
        assert until_lapse is not None and 4 < until_lapse <= 5  # the lease lapsing
        assert await store.seconds_until_due(["other"]) is None
        later = (await store.clock()) + timedelta(seconds=2)
        await store.create_task(created("b", ready_at=later))
        until_timer = await store.seconds_until_due(["default"])
        assert until_timer is not None and 1 < until_timer <= 2

    async def test_queue_depth_counts_what_could_be_claimed_now(self, store: Store) -> None:
        assert await store.queue_depth(["default", "other"]) == {}
        later = (await store.clock()) + timedelta(hours=1)
        await store.create_task(created("a"))
        await store.create_task(created("b"))
        await store.create_task(created("c", ready_at=later))  # not due yet
        await store.create_task(created("d", queue="other"))
        await store.create_task(created("e", queue="elsewhere"))
        assert await store.queue_depth(["default", "other"]) == {"default": 2, "other": 1}
        claim = await store.claim("w", ["default"], LEASE)
        assert claim is not None  # running under a live lease: not claimable
        assert await store.queue_depth(["default"]) == {"default": 1}

    async def test_lease_must_be_positive(self, store: Store) -> None:
        await store.create_task(created("a"))
        for lease in (0, -1, float("inf"), float("nan")):
            with pytest.raises(ConfigError):
                await store.claim("w", ["default"], lease)
        assert (await store.get_task("a")).status is TaskStatus.READY  # type: ignore[union-attr]

    # --- many claimants -----------------------------------------------------------

    async def test_concurrent_claimants_never_share_a_task(
        self, store: Store, store_url: str
    ) -> None:
        del store  # asked for only to have the schema migrated
        stores = [await open_store(store_url) for _ in range(4)]
        try:
            for n in range(200):
                await stores[0].create_task(created(f"t{n:03}", queue=RACE_QUEUE))

            async def claim_all(index: int) -> list[tuple[str, int]]:
                got: list[tuple[str, int]] = []
                while True:
                    claim = await stores[index % 4].claim(f"w{index}", [RACE_QUEUE], LEASE)
                    if claim is None:
                        return got
                    got.append((claim.task_id, claim.epoch))

            results = await asyncio.gather(*(claim_all(i) for i in range(8)))
            claimed = [item for result in results for item in result]
            assert sorted(task_id for task_id, _ in claimed) == [f"t{n:03}" for n in range(200)]
            assert {epoch for _, epoch in claimed} == {1}
        finally:
            for store in stores:
                await store.close()

    async def test_processes_racing_never_finish_a_task_twice(
        self, store: Store, store_url: str
    ) -> None:
        for n in range(300):
            await store.create_task(created(f"p{n:03}", queue=RACE_QUEUE))
        racers = [
            subprocess.Popen(  # noqa: ASYNC220 - waited for in a thread below
                [sys.executable, "-m", "noeta.testing.claim_race", store_url, f"proc{i}"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(4)
        ]
        finished: list[str] = []
        for racer in racers:
            out, err = await asyncio.to_thread(racer.communicate, timeout=120)
            assert racer.returncode == 0, err
            finished += out.split()
        assert sorted(finished) == [f"p{n:03}" for n in range(300)]
        for task_id in ("p000", "p150", "p299"):
            log = await store.read_log(task_id)
            assert [e.type for e in log] == ["created", "raced"]
