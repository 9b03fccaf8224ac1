"""The contract for the fence: an append lands only under the current epoch, a live lease
and the expected sequence number; renewals, releases, holding and finishing."""

from __future__ import annotations

import asyncio

import pytest

from noeta.core.errors import Conflict
from noeta.core.ports.store import (
    Delivery,
    Finish,
    NewEvent,
    Store,
    TaskStatus,
    WaitHolding,
)
from noeta.testing.store_contract.fixtures import (
    LEASE,
    SHORT_LEASE,
    created,
    eventually_claim,
    take_over,
)


class FenceContract:
    """The single-writer fence (ADR-0001) and the claim states around it."""

    async def test_two_racing_appends_cannot_both_land(self, store: Store) -> None:
        await store.create_task(created("a"))
        claim = await store.claim("w", ["default"], LEASE)
        assert claim is not None
        results = await asyncio.gather(
            *(store.append(claim, 1, [NewEvent("step", {"n": n})]) for n in range(8)),
            return_exceptions=True,
        )
        assert sum(1 for r in results if r == 2) == 1
        assert all(isinstance(r, Conflict) for r in results if r != 2)
        assert len(await store.read_log("a")) == 2

    async def test_append_checks_expected_seq(self, store: Store) -> None:
        await store.create_task(created("a"))
        claim = await store.claim("w", ["default"], LEASE)
        assert claim is not None
        assert await store.append(claim, 1, [NewEvent("x", 1), NewEvent("y", 2)]) == 3
        with pytest.raises(Conflict):
            await store.append(claim, 1, [NewEvent("z", 3)])
        assert [e.seq for e in await store.read_log("a")] == [1, 2, 3]

    async def test_each_event_records_the_claim_that_appended_it(self, store: Store) -> None:
        """The store writes each event's epoch and owner (the cluster run's invariants read
        them); the client passes neither. Created events were appended under no claim."""
        await store.create_task(created("a"))
        old = await store.claim("w1", ["default"], LEASE)
        assert old is not None
        assert await store.append(old, 1, [NewEvent("light", {})]) == 2
        new = await take_over(store, old, "w2")
        child = created("child")
        finish = Finish(TaskStatus.DONE)
        await store.append(new, 2, [NewEvent("x", 1), NewEvent("y", 2)], new_tasks=[child])
        await store.append(new, 4, [NewEvent("end", {})], next_state=finish)
        recorded = [(e.seq, e.epoch, e.owner) for e in await store.read_log("a")]
        assert recorded == [
            (1, 0, None),
            (2, old.epoch, "w1"),
            (3, new.epoch, "w2"),
            (4, new.epoch, "w2"),
            (5, new.epoch, "w2"),
        ]
        assert [(e.epoch, e.owner) for e in await store.read_log("child")] == [(0, None)]
        loaded = await store.load("a", "v")
        loaded_claims = [(e.epoch, e.owner) for e in loaded.events][1:3]
        assert loaded_claims == [(old.epoch, "w1"), (new.epoch, "w2")]

    async def test_an_expired_lease_is_reclaimed_and_the_old_holder_cannot_write(
        self, store: Store
    ) -> None:
        await store.create_task(created("a"))
        old = await store.claim("w1", ["default"], SHORT_LEASE)
        assert old is not None
        new = await eventually_claim(store, "w2", ["default"])
        assert new.task_id == "a" and new.epoch == old.epoch + 1
        assert new.taken_over and not old.taken_over  # a lapsed lease: a takeover
        # The stale worker's expected_seq is right, its epoch is not: refused.
        with pytest.raises(Conflict):
            await store.append(old, 1, [NewEvent("stale", {})])
        assert await store.renew([old], LEASE) == {}
        assert not await store.release(old)
        assert await store.append(new, 1, [NewEvent("fresh", {})]) == 2
        assert [e.type for e in await store.read_log("a")] == ["created", "fresh"]

    async def test_append_after_the_lease_expired_is_refused(self, store: Store) -> None:
        await store.create_task(created("a"))
        claim = await store.claim("w", ["default"], SHORT_LEASE)
        assert claim is not None
        while await store.clock() <= claim.lease_until:  # noqa: ASYNC110 - the store's clock
            await asyncio.sleep(0.02)
        with pytest.raises(Conflict):
            await store.append(claim, 1, [NewEvent("late", {})])
        assert len(await store.read_log("a")) == 1

    async def test_renew_extends_held_claims_only(self, store: Store) -> None:
        for task_id in ("a", "b"):
            await store.create_task(created(task_id))
        a = await store.claim("w", ["default"], LEASE)
        b = await store.claim("w", ["default"], LEASE)
        assert a is not None and b is not None
        await store.append(b, 1, [NewEvent("end", {})], next_state=Finish())
        renewed = await store.renew([a, b], LEASE * 2)
        assert set(renewed) == {"a"}
        assert renewed["a"].epoch == a.epoch and renewed["a"].lease_until > a.lease_until

    async def test_release_makes_the_task_ready(self, store: Store) -> None:
        await store.create_task(created("a"))
        claim = await store.claim("w", ["default"], LEASE)
        assert claim is not None and await store.release(claim)
        task = await store.get_task("a")
        assert task is not None and task.status is TaskStatus.READY
        with pytest.raises(Conflict):
            await store.append(claim, 1, [NewEvent("after-release", {})])
        again = await store.claim("w2", ["default"], LEASE)
        assert again is not None and again.epoch == claim.epoch + 1

    async def test_a_wait_holding_its_claim_stays_with_that_claim(self, store: Store) -> None:
        await store.create_task(created("a"))
        claim = await store.claim("w", ["default"], LEASE)
        assert claim is not None
        await store.append(claim, 1, [NewEvent("job-started", {})], next_state=WaitHolding())
        assert (await store.get_task("a")).status is TaskStatus.HOLDING  # type: ignore[union-attr]
        await store.deliver(Delivery("a", {"job": "done"}))
        assert await store.claim("w2", ["default"], LEASE) is None
        assert set(await store.renew([claim], LEASE)) == {"a"}
        assert [c.task_id for c in await store.owned_by("w")] == ["a"]
        assert await store.append(claim, 2, [NewEvent("job-finished", {})]) == 3

    async def test_continue_after_holding_runs_again(self, store: Store) -> None:
        await store.create_task(created("a"))
        claim = await store.claim("w", ["default"], LEASE)
        assert claim is not None
        await store.append(claim, 1, [NewEvent("job-started", {})], next_state=WaitHolding())
        await store.append(claim, 2, [NewEvent("job-finished", {})])
        assert (await store.get_task("a")).status is TaskStatus.RUNNING  # type: ignore[union-attr]

    async def test_a_lapsed_lease_nobody_took_can_be_renewed(self, store: Store) -> None:
        # The epoch is what isolates: while no one has claimed the task since, the holder
        # may still renew; only then may it append again.
        await store.create_task(created("a"))
        claim = await store.claim("w", ["default"], SHORT_LEASE)
        assert claim is not None
        while await store.clock() <= claim.lease_until:  # noqa: ASYNC110 - the store's clock
            await asyncio.sleep(0.02)
        renewed = (await store.renew([claim], LEASE))["a"]
        assert renewed.epoch == claim.epoch
        assert await store.append(renewed, 1, [NewEvent("resumed", {})]) == 2

    async def test_a_lapsed_holding_claim_is_taken_over(self, store: Store) -> None:
        await store.create_task(created("a"))
        claim = await store.claim("w", ["default"], LEASE)
        assert claim is not None
        await store.append(claim, 1, [NewEvent("job-started", {})], next_state=WaitHolding())
        taken = await take_over(store, claim, "w2")
        assert taken.task_id == "a" and taken.epoch == claim.epoch + 1
        with pytest.raises(Conflict):
            await store.append(claim, 2, [NewEvent("job-finished", {})])

    async def test_finish_is_final(self, store: Store) -> None:
        await store.create_task(created("a"))
        claim = await store.claim("w", ["default"], LEASE)
        assert claim is not None
        await store.append(claim, 1, [NewEvent("answer", "42")], next_state=Finish(TaskStatus.DONE))
        assert (await store.get_task("a")).status is TaskStatus.DONE  # type: ignore[union-attr]
        await store.deliver(Delivery("a", "too late"))
        assert await store.claim("w", ["default"], LEASE) is None
        with pytest.raises(Conflict):
            await store.append(claim, 2, [NewEvent("more", {})])

    async def test_owned_by_lists_the_workers_claims(self, store: Store) -> None:
        for task_id in ("a", "b", "c"):
            await store.create_task(created(task_id))
        claims = [await store.claim(w, ["default"], LEASE) for w in ("w1", "w1", "w2")]
        owned = await store.owned_by("w1")
        assert owned == [c for c in claims if c is not None and c.worker == "w1"]
