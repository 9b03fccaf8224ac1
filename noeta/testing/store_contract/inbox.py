"""The contract for the inbox: deliveries, their dedupe keys, the waits they wake, takes,
and what an append delivers and creates."""

from __future__ import annotations

from datetime import timedelta

import pytest

from noeta.core.errors import Conflict, UnknownTask
from noeta.core.ports.store import (
    CANCEL_KEY,
    Delivery,
    NewEvent,
    NewTask,
    Store,
    Wait,
)
from noeta.testing.store_contract.fixtures import LEASE, created, eventually_claim


class InboxContract:
    """Deliveries, wake-ups and takes."""

    async def test_delivery_dedupe(self, store: Store) -> None:
        await store.create_task(created("a"))
        assert await store.deliver(Delivery("a", "hello", dedupe_key="k1"))
        assert not await store.deliver(Delivery("a", "hello again", dedupe_key="k1"))
        assert await store.deliver(Delivery("a", "no key"))
        assert await store.deliver(Delivery("a", "no key"))
        inbox = await store.read_inbox("a")
        assert [entry.payload for entry in inbox] == ["hello", "no key", "no key"]

    async def test_a_delivery_to_an_unknown_task_is_refused(self, store: Store) -> None:
        with pytest.raises(UnknownTask):
            await store.deliver(Delivery("nope", "hello"))

    async def test_a_delivery_wakes_a_waiting_task(self, store: Store) -> None:
        await store.create_task(created("a"))
        claim = await store.claim("w", ["default"], LEASE)
        assert claim is not None
        await store.append(claim, 1, [NewEvent("turn-ended", {})], next_state=Wait())
        assert await store.claim("w", ["default"], LEASE) is None
        await store.deliver(Delivery("a", "next message"))
        woken = await store.claim("w", ["default"], LEASE)
        assert woken is not None and woken.task_id == "a"

    async def test_a_delivery_during_the_turn_is_not_slept_through(self, store: Store) -> None:
        await store.create_task(created("a"))
        claim = await store.claim("w", ["default"], LEASE)
        assert claim is not None
        await store.deliver(Delivery("a", "arrived while running"))
        await store.append(claim, 1, [NewEvent("turn-ended", {})], next_state=Wait())
        woken = await store.claim("w", ["default"], LEASE)
        assert woken is not None and woken.task_id == "a"

    async def test_a_wait_for_one_key_is_woken_only_by_that_key(self, store: Store) -> None:
        await store.create_task(created("a"))
        claim = await store.claim("w", ["default"], LEASE)
        assert claim is not None
        await store.deliver(Delivery("a", "chat before", dedupe_key="msg:1"))
        waiting = Wait(wake_on_prefix="answer:c1")
        await store.append(claim, 1, [NewEvent("asked", {})], next_state=waiting)
        assert await store.claim("w", ["default"], LEASE) is None  # chat does not wake it
        await store.deliver(Delivery("a", "chat", dedupe_key="msg:2"))
        await store.deliver(Delivery("a", "no key"))
        assert await store.claim("w", ["default"], LEASE) is None
        await store.deliver(Delivery("a", "allow", dedupe_key="answer:c1"))
        woken = await store.claim("w", ["default"], LEASE)
        assert woken is not None and woken.task_id == "a"

    async def test_a_cancel_request_wakes_any_wait(self, store: Store) -> None:
        await store.create_task(created("a"))
        claim = await store.claim("w", ["default"], LEASE)
        assert claim is not None
        await store.append(claim, 1, [NewEvent("asked", {})], next_state=Wait(wake_on_prefix="x:"))
        await store.deliver(Delivery("a", {"kind": "cancel"}, dedupe_key=CANCEL_KEY))
        woken = await store.claim("w", ["default"], LEASE)
        assert woken is not None and woken.task_id == "a"

    async def test_a_timed_wait_becomes_claimable_when_due(self, store: Store) -> None:
        await store.create_task(created("a"))
        claim = await store.claim("w", ["default"], LEASE)
        assert claim is not None
        due = await store.clock() + timedelta(seconds=0.3)
        await store.append(claim, 1, [NewEvent("sleeping", {})], next_state=Wait(until=due))
        woken = await eventually_claim(store, "w", ["default"])
        assert woken.task_id == "a" and woken.lease_until - timedelta(seconds=LEASE) >= due

    async def test_an_inbox_entry_is_taken_exactly_once(self, store: Store) -> None:
        await store.create_task(created("a"))
        await store.deliver(Delivery("a", "m1"))
        claim = await store.claim("w", ["default"], LEASE)
        assert claim is not None
        (entry,) = await store.read_inbox("a")
        assert await store.append(claim, 1, [NewEvent("took", entry.id)], take=[entry.id]) == 2
        with pytest.raises(Conflict):
            await store.append(claim, 2, [NewEvent("took", entry.id)], take=[entry.id])
        with pytest.raises(ValueError):
            await store.append(claim, 2, [], take=[entry.id])
        assert await store.read_inbox("a") == []
        (taken,) = await store.read_inbox("a", untaken_only=False)
        assert taken.taken_seq == 2

    async def test_an_append_delivers_and_creates_tasks_all_or_nothing(self, store: Store) -> None:
        await store.create_task(created("parent"))
        await store.create_task(created("peer"))
        claim = await store.claim("w", ["default"], LEASE)
        assert claim is not None and claim.task_id == "parent"
        child = NewTask("parent.c1.1", [NewEvent("created", {}), NewEvent("briefed", "go")])
        with pytest.raises(UnknownTask):
            await store.append(
                claim,
                1,
                [NewEvent("spawned", {})],
                new_tasks=[child],
                deliveries=[Delivery("peer", "hi"), Delivery("ghost", "boo")],
            )
        assert await store.get_task("parent.c1.1") is None
        assert await store.read_inbox("peer") == []
        assert len(await store.read_log("parent")) == 1
        await store.append(
            claim,
            1,
            [NewEvent("spawned", {})],
            new_tasks=[child],
            deliveries=[Delivery("peer", "hi", dedupe_key="x")],
        )
        assert [(e.seq, e.type) for e in await store.read_log("parent.c1.1")] == [
            (1, "created"),
            (2, "briefed"),
        ]
        assert [e.payload for e in await store.read_inbox("peer")] == ["hi"]
