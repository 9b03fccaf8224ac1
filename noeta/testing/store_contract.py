"""The contract every task store keeps, as a reusable pytest class.

A backend's test module subclasses `StoreContract` once and provides one fixture,
`store_url`: the URL of a fresh, empty store for each test. A change to the `Store`
protocol extends this contract first.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from noeta.backends.stores import open_store
from noeta.core.errors import ConfigError, Conflict, PayloadError, UnknownTask
from noeta.core.payload import JSONValue
from noeta.core.store import (
    CANCEL_KEY,
    Claim,
    CronFire,
    Delivery,
    Finish,
    FireOutcome,
    NewEvent,
    NewTask,
    Snapshot,
    Store,
    TaskStatus,
    Wait,
    WaitHolding,
    cron_message_key,
)
from noeta.testing.claim_race import RACE_QUEUE

LEASE = 30.0
SHORT_LEASE = 0.3


def created(task_id: str, queue: str = "default", **kwargs: object) -> NewTask:
    return NewTask(task_id, [NewEvent("created", {"id": task_id})], queue=queue, **kwargs)  # type: ignore[arg-type]


async def eventually_claim(
    store: Store, worker: str, queues: list[str], within: float = 10.0
) -> Claim:
    """Poll claim until one succeeds: for conditions that only time brings (a lease, a due time)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while loop.time() < deadline:
        claim = await store.claim(worker, queues, LEASE)
        if claim is not None:
            return claim
        await asyncio.sleep(0.02)
    raise AssertionError(f"nothing became claimable within {within} s")


SLOT = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)


def minutes(n: int) -> datetime:
    return SLOT + timedelta(minutes=n)


def task_fire(schedule: str, n: int, overlap: str = "skip") -> CronFire:
    task = created(f"cron.{schedule}.{n}")
    return CronFire(schedule, minutes(n), task, overlap)  # type: ignore[arg-type]


def message_fire(schedule: str, n: int, target: str, overlap: str = "skip") -> CronFire:
    key = cron_message_key(schedule, minutes(n))
    delivery = Delivery(target, {"text": f"slot {n}"}, key)
    return CronFire(schedule, minutes(n), delivery, overlap)  # type: ignore[arg-type]


class StoreContract:
    """Not collected by itself (no Test prefix); subclass as `TestXStore(StoreContract)`."""

    @pytest.fixture
    def store_url(self) -> str:
        raise NotImplementedError("a backend's test module provides store_url")

    @pytest.fixture
    async def store(self, store_url: str) -> AsyncIterator[Store]:
        store = await open_store(store_url, migrate=True)
        yield store
        await store.close()

    # --- creation and claims --------------------------------------------------------------

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

    # --- the fence ---------------------------------------------------------------------------

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
        claim = await store.claim("w", ["default"], SHORT_LEASE)
        assert claim is not None
        await store.append(claim, 1, [NewEvent("job-started", {})], next_state=WaitHolding())
        taken = await eventually_claim(store, "w2", ["default"])
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

    # --- inbox ---------------------------------------------------------------------------------

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

    # --- payloads ------------------------------------------------------------------------------

    async def test_payloads_round_trip_exactly(self, store: Store) -> None:
        nested: JSONValue = "bottom"
        for _ in range(150):
            nested = [nested]
        invalid_utf8 = b"ok \xff\xfe bytes \x00 end".decode("utf-8", errors="surrogateescape")
        values: list[JSONValue] = [
            "NUL \x00 inside",
            invalid_utf8,
            "lone \ud800 surrogate",
            "x" * (1024 * 1024),
            nested,
            {"emoji": "\U0001f600", "cjk": "单写者", "n": -12345678901234567890},
            1.5e-300,
            True,
            None,
            {"": [{}, []]},
        ]
        await store.create_task(created("a"))
        claim = await store.claim("w", ["default"], LEASE)
        assert claim is not None
        events = [NewEvent(f"v{i}", value) for i, value in enumerate(values)]
        await store.append(claim, 1, events)
        assert [e.data for e in (await store.read_log("a"))[1:]] == values
        await store.deliver(Delivery("a", values[1], dedupe_key="key"))
        assert (await store.read_inbox("a"))[0].payload == values[1]

    async def test_unstorable_payloads_fail_before_writing(self, store: Store) -> None:
        await store.create_task(created("a"))
        claim = await store.claim("w", ["default"], LEASE)
        assert claim is not None
        too_deep: JSONValue = 1
        for _ in range(1000):
            too_deep = [too_deep]
        for bad in (float("nan"), b"bytes", too_deep, {1: "int key"}, ("tuple",)):
            with pytest.raises(PayloadError):
                await store.append(claim, 1, [NewEvent("ok", 1), NewEvent("bad", bad)])  # type: ignore[arg-type]
            with pytest.raises(PayloadError):
                await store.deliver(Delivery("a", bad))  # type: ignore[arg-type]
        for bad_key in ("k" * 10_000, "nul \x00", "lone \ud800"):
            with pytest.raises(PayloadError):
                await store.deliver(Delivery("a", "x", dedupe_key=bad_key))
        for bad_id in ("", "nul \x00", "lone \udc80"):
            with pytest.raises(PayloadError):
                await store.create_task(created(bad_id))
        assert len(await store.read_log("a")) == 1
        assert await store.read_inbox("a") == []

    # --- snapshots and listing -----------------------------------------------------------------

    async def test_snapshots_are_kept_per_version(self, store: Store) -> None:
        await store.create_task(created("a"))
        await store.put_snapshot(Snapshot("a", "v1", 1, b"\x00state-1"))
        await store.put_snapshot(Snapshot("a", "v2", 1, b"other"))
        await store.put_snapshot(Snapshot("a", "v1", 5, b"\x00state-5"))
        assert await store.get_snapshot("a", "v1") == Snapshot("a", "v1", 5, b"\x00state-5")
        assert await store.get_snapshot("a", "v2") == Snapshot("a", "v2", 1, b"other")
        assert await store.get_snapshot("a", "v3") is None
        with pytest.raises(UnknownTask):
            await store.put_snapshot(Snapshot("nope", "v1", 1, b""))

    async def test_load_reads_snapshot_log_after_it_and_untaken_inbox(self, store: Store) -> None:
        await store.create_task(created("a"))
        claim = await store.claim("w", ["default"], LEASE)
        assert claim is not None
        await store.append(claim, 1, [NewEvent("e2", 2), NewEvent("e3", 3)])
        await store.deliver(Delivery("a", "hi"))
        loaded = await store.load("a", "v1")
        assert loaded.snapshot is None and [e.seq for e in loaded.events] == [1, 2, 3]
        assert [entry.payload for entry in loaded.inbox] == ["hi"]
        await store.put_snapshot(Snapshot("a", "v1", 2, b"state"))
        loaded = await store.load("a", "v1")
        assert loaded.snapshot == Snapshot("a", "v1", 2, b"state")
        assert [e.seq for e in loaded.events] == [3]
        assert [e.seq for e in (await store.load("a", "v2")).events] == [1, 2, 3]

    async def test_list_tasks_by_status_and_queue(self, store: Store) -> None:
        await store.create_task(created("a", queue="q1"))
        await store.create_task(created("b", queue="q2"))
        await store.create_task(created("c", queue="q2"))
        claim = await store.claim("w", ["q2"], LEASE)
        assert claim is not None
        running = await store.list_tasks(status=TaskStatus.RUNNING)
        assert [t.id for t in running] == [claim.task_id]
        assert {t.id for t in await store.list_tasks(queue="q2")} == {"b", "c"}
        assert {t.id for t in await store.list_tasks()} == {"a", "b", "c"}
        assert len(await store.list_tasks(limit=2)) == 2

    # --- many claimants ------------------------------------------------------------------------

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

    # --- cron ------------------------------------------------------------------------------

    async def test_a_cron_slot_fires_once_with_its_task(self, store: Store) -> None:
        assert await store.fire_cron(task_fire("nightly", 0)) is FireOutcome.CREATED
        assert await store.fire_cron(task_fire("nightly", 0)) is FireOutcome.ALREADY
        assert [e.type for e in await store.read_log("cron.nightly.0")] == ["created"]
        (record,) = await store.cron_history("nightly")
        assert (record.slot, record.outcome, record.task_id) == (
            minutes(0),
            FireOutcome.CREATED,
            "cron.nightly.0",
        )
        marks = await store.cron_marks(["nightly"], minutes(-60))
        assert marks == {"nightly": minutes(0)}  # the fire moved the mark, not the call

    async def test_overlap_skip_waits_for_the_previous_task_to_finish(self, store: Store) -> None:
        assert await store.fire_cron(task_fire("job", 0)) is FireOutcome.CREATED
        assert await store.fire_cron(task_fire("job", 1)) is FireOutcome.SKIPPED_OVERLAP
        assert await store.get_task("cron.job.1") is None
        claim = await store.claim_task("w", "cron.job.0", LEASE)
        assert claim is not None
        await store.append(claim, 1, [NewEvent("done", {})], next_state=Finish())
        assert await store.fire_cron(task_fire("job", 2)) is FireOutcome.CREATED
        assert await store.fire_cron(task_fire("job", 3, "allow")) is FireOutcome.CREATED
        history = await store.cron_history("job")
        assert [(r.outcome, r.task_id) for r in history] == [
            (FireOutcome.CREATED, "cron.job.3"),
            (FireOutcome.CREATED, "cron.job.2"),
            (FireOutcome.SKIPPED_OVERLAP, None),
            (FireOutcome.CREATED, "cron.job.0"),
        ]
        assert "cron.job.0 is still ready" in history[2].detail

    async def test_a_cron_message_is_delivered_once_and_wakes_the_task(self, store: Store) -> None:
        await store.create_task(created("chat"))
        claim = await store.claim_task("w", "chat", LEASE)
        assert claim is not None
        await store.append(claim, 1, [NewEvent("idle", {})], next_state=Wait())
        assert await store.fire_cron(message_fire("poke", 0, "chat")) is FireOutcome.DELIVERED
        assert await store.fire_cron(message_fire("poke", 0, "chat")) is FireOutcome.ALREADY
        (entry,) = await store.read_inbox("chat")
        assert entry.payload == {"text": "slot 0"}
        assert await store.claim("w2", ["default"], LEASE) is not None  # woken
        # Not taken yet: overlap 'skip' holds the next one back, 'allow' does not.
        skipped = await store.fire_cron(message_fire("poke", 1, "chat"))
        assert skipped is FireOutcome.SKIPPED_OVERLAP
        allowed = await store.fire_cron(message_fire("poke", 2, "chat", "allow"))
        assert allowed is FireOutcome.DELIVERED
        assert len(await store.read_inbox("chat")) == 2

    async def test_a_cron_message_to_a_missing_or_finished_task_is_recorded(
        self, store: Store
    ) -> None:
        assert await store.fire_cron(message_fire("poke", 0, "nope")) is FireOutcome.NO_TARGET
        await store.create_task(created("gone"))
        claim = await store.claim_task("w", "gone", LEASE)
        assert claim is not None
        await store.append(claim, 1, [NewEvent("done", {})], next_state=Finish())
        assert await store.fire_cron(message_fire("poke", 1, "gone")) is FireOutcome.NO_TARGET
        assert await store.read_inbox("gone") == []
        details = [r.detail for r in await store.cron_history("poke")]
        assert details == ["task gone is done", "task nope does not exist"]

    async def test_a_missed_slot_is_recorded_and_runs_nothing(self, store: Store) -> None:
        fire = CronFire("hourly", minutes(0), None, detail="12 slots missed")
        assert await store.fire_cron(fire) is FireOutcome.MISSED
        (record,) = await store.cron_history("hourly")
        assert (record.outcome, record.task_id, record.detail) == (
            FireOutcome.MISSED,
            None,
            "12 slots missed",
        )
        assert await store.list_tasks() == []

    async def test_cron_marks_register_new_schedules_and_advance_disabled_ones(
        self, store: Store
    ) -> None:
        assert await store.cron_marks(["a", "b"], minutes(0)) == {"a": minutes(0), "b": minutes(0)}
        marks = await store.cron_marks(["a", "b", "c"], minutes(5), advance=["b"])
        assert marks == {"a": minutes(0), "b": minutes(5), "c": minutes(5)}
        await store.fire_cron(task_fire("a", 3))
        assert (await store.cron_marks(["a"], minutes(9)))["a"] == minutes(3)

    async def test_schedulers_racing_fire_each_slot_once(
        self, store: Store, store_url: str
    ) -> None:
        del store  # asked for only to have the schema migrated
        stores = [await open_store(store_url) for _ in range(2)]
        try:

            async def fire_all(racer: Store) -> list[FireOutcome]:
                return [await racer.fire_cron(task_fire("race", n, "allow")) for n in range(50)]

            first, second = await asyncio.gather(*(fire_all(racer) for racer in stores))
            for a, b in zip(first, second, strict=True):
                assert sorted((a, b)) == sorted((FireOutcome.CREATED, FireOutcome.ALREADY))
            assert len(await stores[0].list_tasks(limit=100)) == 50
        finally:
            for store in stores:
                await store.close()

    async def test_wake_due_reports_the_next_due_time(self, store: Store) -> None:
        now = await store.clock()
        due = now + timedelta(seconds=30)
        await store.create_task(created("later", ready_at=due))
        clock, next_due = await store.wake_due(now - timedelta(seconds=1))
        assert clock >= now and next_due == due
