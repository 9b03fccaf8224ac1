"""The contract for `claim_and_load`: a batch of claims, each with its own epoch and lease,
each task read as `load` reads it, each queue walked in its own due order, every write
under a batch claim fenced like any other."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from noeta.core.errors import Conflict
from noeta.core.ports.queue_settings import QueueChange, queue_settings_store
from noeta.core.ports.store import (
    Delivery,
    Finish,
    NewEvent,
    Snapshot,
    Store,
    TaskStatus,
    Wait,
)
from noeta.testing.store_contract.fixtures import LEASE, created

VERSION = "v1"


async def created_due(store: Store, ids: list[str], queue: str = "default") -> None:
    """Tasks due in the order given, the first longest (seconds apart, in the past)."""
    now = await store.clock()
    for number, task_id in enumerate(ids):
        due = now - timedelta(seconds=len(ids) - number)
        assert await store.create_task(created(task_id, queue, ready_at=due))


class ClaimAndLoadContract:
    """Batch claims and the claim that reads its tasks."""

    async def test_a_batch_claims_up_to_its_limit_each_with_its_own_epoch(
        self, store: Store
    ) -> None:
        await created_due(store, ["a", "b", "c", "d", "e"])
        first = await store.claim("w0", ["default"], LEASE)
        assert first is not None and first.task_id == "a"
        assert await store.release(first)  # due again now, after the others; epoch 1 taken
        before = await store.clock()
        batch = await store.claim_and_load("w1", ["default"], LEASE, limit=3, snapshot_version="v")
        claims = {each.claim.task_id: each.claim for each in batch}
        assert set(claims) == {"b", "c", "d"}  # the three due longest
        rest = await store.claim_and_load("w1", ["default"], LEASE, limit=3, snapshot_version="v")
        claims |= {each.claim.task_id: each.claim for each in rest}
        assert len(rest) == 2 and set(claims) == {"a", "b", "c", "d", "e"}
        assert {task_id: c.epoch for task_id, c in claims.items()} == {
            "a": 2,
            "b": 1,
            "c": 1,
            "d": 1,
            "e": 1,
        }
        for claim in claims.values():
            assert claim.worker == "w1" and claim.lease_until >= before + timedelta(seconds=1)
            task = await store.get_task(claim.task_id)
            assert task is not None and task.status is TaskStatus.RUNNING
            assert task.owner == "w1" and task.owner_epoch == claim.epoch
        assert await store.claim_and_load("w3", ["default"], LEASE, snapshot_version="v") == []

    async def test_each_task_comes_as_load_reads_it(self, store: Store) -> None:
        await store.create_task(created("a"))
        claim = await store.claim("w", ["default"], LEASE)
        assert claim is not None
        await store.append(claim, 1, [NewEvent("step", 2)])
        await store.put_snapshot(Snapshot("a", VERSION, 2, b"\x00state"))
        await store.append(claim, 2, [NewEvent("step", 3)], next_state=Wait())
        await store.deliver(Delivery("a", {"text": "taken"}, dedupe_key="k1"))
        await store.deliver(Delivery("a", "kept \x00 exactly", dedupe_key="k2"))
        claim = await store.claim("w", ["default"], LEASE)  # woken by the delivery
        assert claim is not None
        taken = (await store.read_inbox("a"))[0].id
        await store.append(claim, 3, [NewEvent("took", 1)], take=[taken], next_state=Wait())
        await store.deliver(Delivery("a", {"text": "wakes"}, dedupe_key="k3"))

        (claimed,) = await store.claim_and_load("w2", ["default"], LEASE, snapshot_version=VERSION)
        assert claimed.claim.task_id == "a" and claimed.claim.epoch == 3
        loaded = claimed.loaded
        assert loaded is not None  # nothing raced the claim: it read the task
        assert loaded == await store.load("a", VERSION)
        assert loaded.snapshot == Snapshot("a", VERSION, 2, b"\x00state")
        assert [(e.seq, e.type, e.data, e.epoch) for e in loaded.events] == [
            (3, "step", 3, 1),
            (4, "took", 1, 2),
        ]
        assert [(i.dedupe_key, i.payload) for i in loaded.inbox] == [
            ("k2", "kept \x00 exactly"),
            ("k3", {"text": "wakes"}),
        ]
        # Without a snapshot of the asked version: the whole log.
        await store.release(claimed.claim)
        (again,) = await store.claim_and_load("w3", ["default"], LEASE, snapshot_version="v9")
        assert again.loaded is not None and again.loaded.snapshot is None
        assert [e.seq for e in again.loaded.events] == [1, 2, 3, 4]

    async def test_a_batch_claim_is_fenced_like_any_other(self, store: Store) -> None:
        await created_due(store, ["a", "b"])
        batch = await store.claim_and_load("w1", ["default"], LEASE, limit=2, snapshot_version="v")
        first, second = (each.claim for each in batch)
        assert await store.append(first, 1, [NewEvent("step", 1)]) == 2
        assert await store.append(second, 1, [NewEvent("step", 1)]) == 2
        assert await store.release(second)
        (heir,) = await store.claim_and_load("w2", ["default"], LEASE, snapshot_version="v")
        assert heir.claim.task_id == second.task_id and heir.claim.epoch == second.epoch + 1
        with pytest.raises(Conflict):
            await store.append(second, 2, [NewEvent("stale", 1)])
        assert [e.type for e in await store.read_log(second.task_id)] == ["created", "step"]

    async def test_finishes_sent_with_a_claim_are_each_fenced_and_told_alone(
        self, store: Store
    ) -> None:
        """A worker's finishes and its next claim, sent at once (the PostgreSQL store
        sends them in one round trip and commit, ADR-0116): each finish lands or is
        refused on its own, and the claim takes what it would have taken alone."""
        ids = [f"f{n}" for n in range(6)]
        await created_due(store, ids)
        batch = await store.claim_and_load("w", ["default"], LEASE, limit=6, snapshot_version="v")
        claims = {each.claim.task_id: each.claim for each in batch}
        lost = claims.pop("f3")  # claimed again by another worker: its finish is refused
        assert await store.release(lost)
        again = await store.claim("w2", ["default"], LEASE)
        assert again is not None and again.task_id == "f3"
        await created_due(store, ["next0", "next1"])
        done = Finish(TaskStatus.DONE)
        outcomes = await asyncio.gather(
            *(
                store.append(c, 1, [NewEvent("done", t)], next_state=done)
                for t, c in claims.items()
            ),
            store.append(lost, 1, [NewEvent("done", "f3")], next_state=done),
            store.claim_and_load("w", ["default"], LEASE, limit=2, snapshot_version="v"),
            return_exceptions=True,
        )
        assert outcomes[: len(claims)] == [2] * len(claims)
        assert isinstance(outcomes[len(claims)], Conflict)
        taken = outcomes[-1]
        assert isinstance(taken, list)
        assert sorted(each.claim.task_id for each in taken) == ["next0", "next1"]
        for task_id in claims:
            task = await store.get_task(task_id)
            assert task is not None and task.status is TaskStatus.DONE
        assert [e.seq for e in await store.read_log("f3")] == [1]

    async def test_each_queue_is_walked_in_its_own_due_order(self, store: Store) -> None:
        await created_due(store, [f"bulk-{n}" for n in range(30)], queue="bulk")
        await created_due(store, ["mine"], queue="default")
        (only,) = await store.claim_and_load("w", ["default"], LEASE, limit=5, snapshot_version="v")
        assert only.claim.task_id == "mine"
        await store.release(only.claim)
        # Across queues: the due longest of all, whichever queue holds them.
        batch = await store.claim_and_load(
            "w", ["default", "bulk", "bulk"], LEASE, limit=3, snapshot_version="v"
        )
        assert sorted(each.claim.task_id for each in batch) == ["bulk-0", "bulk-1", "bulk-2"]
        assert await store.claim_and_load("w", [], LEASE, snapshot_version="v") == []

    @pytest.mark.parametrize("limit", [0, -1, 1001, True])
    async def test_a_claim_limit_outside_1_to_1000_is_refused(
        self, store: Store, limit: int
    ) -> None:
        await store.create_task(created("a"))
        with pytest.raises(ValueError, match="a claim takes 1 to 1000 tasks"):
            await store.claim_and_load("w", ["default"], LEASE, limit=limit, snapshot_version="v")
        task = await store.get_task("a")
        assert task is not None and task.status is TaskStatus.READY

    async def test_a_claim_takes_none_of_the_tasks_it_excludes(self, store: Store) -> None:
        # A worker excludes its own runs: one whose lease lapsed while its renewal was
        # held up is renewed late, never claimed again by the same process (ADR-0079).
        await created_due(store, ["a", "b", "c"])
        batch = await store.claim_and_load(
            "w", ["default"], LEASE, limit=5, snapshot_version="v", excluding=["a", "c"]
        )
        assert [each.claim.task_id for each in batch] == ["b"]
        rest = await store.claim_and_load("w", ["default"], LEASE, limit=5, snapshot_version="v")
        assert {each.claim.task_id for each in rest} == {"a", "c"}

    async def test_a_named_claim_takes_only_those_claimable_in_its_queues_without_settings(
        self, store: Store
    ) -> None:
        """`only` (ADR-0109): a worker continuing what its last run made claimable takes
        that task, whatever is due before it, and nothing a plain claim would not take:
        not one waiting, in another queue, excluded, or in a queue with settings."""
        await created_due(store, ["older", "named", "other"])
        await created_due(store, ["elsewhere"], queue="q2")
        await created_due(store, ["limited"], queue="limited")
        await queue_settings_store(store).set_queue("limited", QueueChange(concurrency=5))
        later = (await store.clock()) + timedelta(hours=1)
        assert await store.create_task(created("later", ready_at=later))
        queues = ["default", "limited"]

        async def named(*ids: str, excluding: tuple[str, ...] = ()) -> list[str]:
            claimed = await store.claim_and_load(
                "w", queues, LEASE, snapshot_version=VERSION, only=ids, excluding=excluding
            )
            return [each.claim.task_id for each in claimed]

        assert await named("later", "elsewhere", "limited", "nope") == []
        assert await named("named", excluding=("named",)) == []
        assert await named("named") == ["named"]  # "older" was due first
        assert await named("named") == []  # claimed: running under its lease
        claimed = await store.claim_and_load(
            "w", ["default"], LEASE, snapshot_version=VERSION, only=["other"]
        )
        loaded = claimed[0].loaded
        assert loaded is not None and [e.type for e in loaded.events] == ["created"]
        assert claimed[0].claim.epoch == 1 and not loaded.started_by_claim
        first = await store.claim("w2", ["default"], LEASE)
        assert first is not None and first.task_id == "older"
