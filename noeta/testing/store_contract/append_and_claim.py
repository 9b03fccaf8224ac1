"""The contract for an append and the claim of what it makes claimable (ADR-0121): the
claim is made only once the append landed, takes the named task at its next epoch with
the delivery in the inbox it reads, and misses (None) rather than fails where the task
is not claimable then; a refused append claims nothing. Told the log its claimer holds
(`KnownLog`, ADR-0122), the claim reads only the events after it, and no snapshot, where
that is the truth: the claim right after the known one, a log that reaches its seq."""

from __future__ import annotations

import pytest

from noeta.core.errors import Conflict
from noeta.core.ports.append_and_claim import ClaimAfter
from noeta.core.ports.queue_settings import QueueChange, queue_settings_store
from noeta.core.ports.store import (
    Claim,
    Delivery,
    Finish,
    KnownLog,
    LoadedTask,
    NewEvent,
    Snapshot,
    Store,
    TaskStatus,
    Wait,
)
from noeta.testing.store_contract.fixtures import LEASE, created

VERSION = "v"


def then(
    task_id: str, queues: tuple[str, ...] = ("default",), known: KnownLog | None = None
) -> ClaimAfter:
    return ClaimAfter(task_id, "w", queues, LEASE, VERSION, known=known)


async def waiting_parent(store: Store, queue: str = "default") -> None:
    """`parent`, claimed once and waiting for a delivery; `child`, claimed."""
    assert await store.create_task(created("parent", queue))
    claim = await store.claim_task("w", "parent", LEASE)
    assert claim is not None
    await store.append(claim, 1, [NewEvent("waits", {})], next_state=Wait(wake_on_prefix="back:"))
    assert await store.create_task(created("child"))


async def child_finished_claiming_parent(store: Store, known: KnownLog | None) -> LoadedTask:
    """`child` finishes handing back to `parent` (waiting: `waiting_parent`), claiming it
    with the finish, told `known`: the parent as that claim read it (at epoch 2)."""
    joint = store.capabilities.append_and_claim
    assert joint is not None
    child = await store.claim_task("w", "child", LEASE)
    assert child is not None
    back = Delivery("parent", {"result": 1}, "back:child", continued=True)
    _, claimed = await joint.append_and_claim(
        child, 1, [NewEvent("ended", {})], deliveries=[back],
        next_state=Finish(TaskStatus.DONE), then=then("parent", known=known),
    )  # fmt: skip
    assert claimed is not None and claimed.loaded is not None and claimed.claim.epoch == 2
    assert [entry.payload for entry in claimed.loaded.inbox] == [{"result": 1}]
    return claimed.loaded


class AppendAndClaimContract:
    """A finish and the claim of the task it hands back to."""

    async def test_the_finish_lands_and_the_task_it_woke_is_claimed_with_its_delivery(
        self, store: Store
    ) -> None:
        joint = store.capabilities.append_and_claim
        assert joint is not None
        await waiting_parent(store)
        child = await store.claim_task("w", "child", LEASE)
        assert child is not None
        back = Delivery("parent", {"result": 1}, "back:child", continued=True)
        seq, claimed = await joint.append_and_claim(
            child, 1, [NewEvent("ended", {})], deliveries=[back],
            next_state=Finish(TaskStatus.DONE), then=then("parent"),
        )  # fmt: skip
        assert seq == 2
        assert (await store.get_task("child")).status is TaskStatus.DONE  # type: ignore[union-attr]
        assert claimed is not None and claimed.claim.epoch == 2
        assert claimed.claim.task_id == "parent" and claimed.claim.worker == "w"
        assert claimed.loaded is not None
        assert [e.type for e in claimed.loaded.events][-1] == "waits"
        assert [entry.payload for entry in claimed.loaded.inbox] == [{"result": 1}]
        held = Claim("parent", "w", 2, claimed.claim.lease_until)
        assert await store.append(held, 2, [NewEvent("took", {})]) == 3  # its fence holds

    @pytest.mark.parametrize("why", ["busy", "settings", "not_woken"])
    async def test_a_task_not_claimable_then_is_missed_and_the_finish_still_lands(
        self, store: Store, why: str
    ) -> None:
        joint = store.capabilities.append_and_claim
        assert joint is not None
        await waiting_parent(store, "limited" if why == "settings" else "default")
        if why == "settings":
            await queue_settings_store(store).set_queue("limited", QueueChange(concurrency=5))
        if why == "busy":  # someone else claimed it meanwhile (woken by another delivery)
            assert await store.deliver(Delivery("parent", {"other": 1}, "back:other"))
            assert await store.claim_task("other", "parent", LEASE) is not None
        child = await store.claim_task("w", "child", LEASE)
        assert child is not None
        key = "elsewhere" if why == "not_woken" else "back:child"  # no wake-up: still waits
        seq, claimed = await joint.append_and_claim(
            child, 1, [NewEvent("ended", {})],
            deliveries=[Delivery("parent", {"result": 1}, key, continued=True)],
            next_state=Finish(TaskStatus.DONE), then=then("parent", ("default", "limited")),
        )  # fmt: skip
        assert seq == 2 and claimed is None
        assert (await store.get_task("child")).status is TaskStatus.DONE  # type: ignore[union-attr]
        if why == "settings":  # left claimable, for a claim that weighs the queue's limits
            assert await store.claim_task("x", "parent", LEASE) is not None

    async def test_a_refused_finish_claims_nothing(self, store: Store) -> None:
        joint = store.capabilities.append_and_claim
        assert joint is not None
        await waiting_parent(store)
        child = await store.claim_task("w", "child", LEASE)
        assert child is not None
        stale = Claim("child", "w", child.epoch - 1, child.lease_until)
        with pytest.raises(Conflict):
            await joint.append_and_claim(
                stale, 1, [NewEvent("ended", {})],
                deliveries=[Delivery("parent", {"result": 1}, "back:child", continued=True)],
                next_state=Finish(TaskStatus.DONE), then=then("parent"),
            )  # fmt: skip
        record = await store.get_task("parent")
        assert record is not None and record.owner_epoch == 1 and record.owner == "w"
        assert await store.read_inbox("parent") == []

    @pytest.mark.parametrize("held", ["truth", "claimed_since", "past_the_log", "another_task"])
    async def test_a_claim_told_the_known_log_reads_only_after_it_where_it_is_the_truth(
        self, store: Store, held: str
    ) -> None:
        await waiting_parent(store)  # epoch 1 wrote seq 2 ("waits")
        await store.put_snapshot(Snapshot("parent", VERSION, 1, b"a snapshot at seq 1"))
        known = {
            "truth": KnownLog("parent", 1, 1),  # its claimer folded seq 1: reads seq 2 on
            "claimed_since": KnownLog("parent", 0, 1),  # a claim came between
            "past_the_log": KnownLog("parent", 1, 3),  # the log does not reach it
            "another_task": KnownLog("child", 1, 1),
        }[held]
        loaded = await child_finished_claiming_parent(store, known)
        assert [(e.seq, e.type) for e in loaded.events] == [(2, "waits")]
        if held == "truth":
            assert (loaded.after_seq, loaded.snapshot) == (1, None)
        else:  # read as ever: the snapshot, and the log after it
            assert loaded.after_seq is None and loaded.snapshot is not None
            assert loaded.snapshot.seq == 1

    async def test_a_claim_told_the_whole_log_reads_no_event(self, store: Store) -> None:
        await waiting_parent(store)
        loaded = await child_finished_claiming_parent(store, KnownLog("parent", 1, 2))
        assert (loaded.after_seq, loaded.events) == (2, [])
