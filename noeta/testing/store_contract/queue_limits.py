"""The contract for queue settings (ADR-0073): fleet-wide concurrency, per-key limits,
rates, pause, priorities; what holds a slot and what frees one; the overview."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from noeta.core.errors import ConfigError, PayloadError
from noeta.core.ports.queue_settings import QueueChange, Rate, queue_settings_store
from noeta.core.ports.store import Claim, Finish, NewEvent, Store, TaskStatus, Wait, WaitHolding
from noeta.testing.store_contract.fixtures import LEASE, SHORT_LEASE, created


async def created_in_order(store: Store, specs: list[tuple[str, str | None, int]]) -> None:
    """Tasks (id, key, priority) in queue 'q', due in the order given, seconds apart."""
    now = await store.clock()
    for number, (task_id, key, priority) in enumerate(specs):
        due = now - timedelta(seconds=len(specs) - number)
        task = created(task_id, "q", ready_at=due, concurrency_key=key, priority=priority)
        assert await store.create_task(task)


async def claim_ids(store: Store, limit: int, worker: str = "w", lease: float = LEASE) -> set[str]:
    batch = await store.claim_and_load(worker, ["q"], lease, limit=limit, snapshot_version="v")
    return {each.claim.task_id for each in batch}


async def finish(store: Store, claim: Claim) -> None:
    task = await store.get_task(claim.task_id)
    assert task is not None
    await store.append(claim, task.last_seq, [], next_state=Finish())


class QueueLimitContract:
    """Limits are kept by the claim itself, for every claimer alike."""

    async def test_a_queue_without_settings_is_claimed_as_before(self, store: Store) -> None:
        await created_in_order(store, [(f"t{n}", "k", 0) for n in range(5)])
        assert len(await claim_ids(store, 5)) == 5
        assert await queue_settings_store(store).queue_overview(["nothing-here"]) == []

    async def test_at_most_concurrency_tasks_hold_a_claim(self, store: Store) -> None:
        queues = queue_settings_store(store)
        await queues.set_queue("q", QueueChange(concurrency=2))
        await created_in_order(store, [(f"t{n}", None, 0) for n in range(5)])
        assert await claim_ids(store, 5) == {"t0", "t1"}  # oldest first, two only
        assert await claim_ids(store, 5, "other") == set()  # another worker: none
        first = await store.claim("x", ["q"], LEASE)
        assert first is None
        overview = (await queues.queue_overview(["q"]))[0]
        assert (overview.running, overview.claimable, overview.waiting_for_slot) == (2, 3, 3)

    async def test_a_finish_or_a_wait_frees_a_slot_and_holding_keeps_it(self, store: Store) -> None:
        await queue_settings_store(store).set_queue("q", QueueChange(concurrency=1))
        await created_in_order(store, [("a", None, 0), ("b", None, 0), ("c", None, 0)])
        a = await store.claim("w", ["q"], LEASE)
        assert a is not None and a.task_id == "a"
        await store.append(a, 1, [], next_state=WaitHolding())  # a job runs: still a slot
        assert await store.claim("w", ["q"], LEASE) is None
        await store.append(a, 1, [], next_state=Wait())  # waits for a message: no slot
        b = await store.claim("w", ["q"], LEASE)
        assert b is not None and b.task_id == "b"
        await finish(store, b)
        c = await store.claim("w", ["q"], LEASE)
        assert c is not None and c.task_id == "c"

    async def test_a_lapsed_lease_frees_its_slot_and_is_not_renewed(self, store: Store) -> None:
        await queue_settings_store(store).set_queue("q", QueueChange(concurrency=1))
        await created_in_order(store, [("a", None, 0), ("b", None, 0)])
        a = await store.claim("w", ["q"], LEASE)
        assert a is not None and a.task_id == "a"
        assert await store.claim("w", ["q"], LEASE) is None
        a = (await store.renew([a], SHORT_LEASE))["a"]  # now it may lapse
        # The store's clock decides the lapse: no event says it happened.
        while await store.clock() <= a.lease_until:  # noqa: ASYNC110
            await asyncio.sleep(SHORT_LEASE / 4)
        # The slot is free at once; the renewal that would revive the lapsed claim (a
        # frozen worker waking) is refused, or two would hold claims with a limit of one.
        assert await store.renew([a], LEASE) == {}
        taken = await store.claim("v", ["q"], LEASE)
        assert taken is not None and taken.task_id == "b"  # due before the lease lapsed
        assert await store.claim("v", ["q"], LEASE) is None

    async def test_a_limit_lowered_below_running_stops_claims_until_under_it(
        self, store: Store
    ) -> None:
        queues = queue_settings_store(store)
        await queues.set_queue("q", QueueChange(concurrency=3))
        await created_in_order(store, [(f"t{n}", None, 0) for n in range(5)])
        held = [await store.claim("w", ["q"], LEASE) for _ in range(3)]
        overview = await queues.set_queue("q", QueueChange(concurrency=1))
        assert overview.running == 3 and overview.settings.concurrency == 1
        for claim in held[:2]:
            assert claim is not None
            await finish(store, claim)
            assert await store.claim("w", ["q"], LEASE) is None  # still 2, then 1 running
        assert held[2] is not None
        await finish(store, held[2])
        assert await store.claim("w", ["q"], LEASE) is not None

    async def test_per_key_limits_skip_a_full_key_oldest_first_across_keys(
        self, store: Store
    ) -> None:
        await queue_settings_store(store).set_queue("q", QueueChange(per_key_concurrency=1))
        specs = [("a1", "A", 0), ("a2", "A", 0), ("a3", "A", 0), ("b1", "B", 0), ("n1", None, 0)]
        await created_in_order(store, specs)
        # One of A, then B's though three of A were due before it; a task without a key
        # is limited only by the queue.
        assert await claim_ids(store, 5) == {"a1", "b1", "n1"}
        assert await claim_ids(store, 5) == set()

    async def test_one_claim_at_a_time_keeps_per_key_limits(self, store: Store) -> None:
        await queue_settings_store(store).set_queue("q", QueueChange(per_key_concurrency=2))
        await created_in_order(store, [(f"a{n}", "A", 0) for n in range(4)])
        claims = [await store.claim("w", ["q"], LEASE) for _ in range(3)]
        assert [c.task_id if c else None for c in claims] == ["a0", "a1", None]

    async def test_higher_priority_is_claimed_first_then_due_time(self, store: Store) -> None:
        specs: list[tuple[str, str | None, int]] = [
            ("low-old", None, 0),
            ("high-new", None, 7),
            ("mid", None, 3),
            ("high", None, 7),
        ]
        await created_in_order(store, specs)
        order = []
        while (claim := await store.claim("w", ["q"], LEASE)) is not None:
            order.append(claim.task_id)
        assert order == ["high-new", "high", "mid", "low-old"]

    async def test_priorities_order_a_limited_queue_too(self, store: Store) -> None:
        await queue_settings_store(store).set_queue("q", QueueChange(concurrency=2))
        await created_in_order(store, [("old", None, 0), ("urgent", None, 9), ("next", None, 1)])
        assert await claim_ids(store, 5) == {"urgent", "next"}

    async def test_a_paused_queue_is_not_claimed_until_resumed(self, store: Store) -> None:
        queues = queue_settings_store(store)
        await queues.set_queue("q", QueueChange(paused=True))
        await created_in_order(store, [("a", None, 0)])
        assert await claim_ids(store, 5) == set()
        overview = (await queues.queue_overview(["q"]))[0]
        assert overview.settings.paused and overview.waiting_for_slot == 1
        await queues.set_queue("q", QueueChange(paused=False))
        assert await claim_ids(store, 5) == {"a"}

    async def test_a_rate_limits_claims_started_per_period(self, store: Store) -> None:
        await queue_settings_store(store).set_queue("q", QueueChange(rate=Rate(2, 3600)))
        await created_in_order(store, [(f"t{n}", None, 0) for n in range(4)])
        assert await claim_ids(store, 1) == {"t0"}
        assert await claim_ids(store, 5) == {"t1"}  # one token left of two
        assert await claim_ids(store, 5) == set()

    async def test_a_rate_is_charged_only_for_the_tasks_claimed(self, store: Store) -> None:
        # A busier queue's older tasks fill the claim: the limited queue's candidates are
        # dropped, and must not cost it tokens (issue 25, item 6).
        await queue_settings_store(store).set_queue("q", QueueChange(rate=Rate(3, 3600)))
        await created_in_order(store, [(f"t{n}", None, 0) for n in range(5)])
        now = await store.clock()
        for number in range(3):
            due = now - timedelta(hours=1, seconds=-number)
            assert await store.create_task(created(f"busy{number}", "busy", ready_at=due))
        batch = await store.claim_and_load("w", ["busy", "q"], LEASE, limit=3, snapshot_version="v")
        assert {each.claim.task_id for each in batch} == {"busy0", "busy1", "busy2"}
        assert await claim_ids(store, 5) == {"t0", "t1", "t2"}  # all three tokens are left

    async def test_a_subtask_carries_its_parents_key_and_priority(self, store: Store) -> None:
        # A tenant must not escape its per-key limit, nor its priority, through Agent
        # (issue 25, item 9): what an append creates is the appending task's subtask.
        await queue_settings_store(store).set_queue("q", QueueChange(per_key_concurrency=1))
        await created_in_order(store, [("older", None, 3), ("parent", "tenant", 5)])
        parent = await store.claim_task("w", "parent", LEASE)
        assert parent is not None
        await store.append(
            parent, 1, [NewEvent("launched", {})], new_tasks=[created("parent.c.1", "q")]
        )
        assert await claim_ids(store, 5) == {"older"}  # not the child: its key is at its limit
        await finish(store, parent)
        await created_in_order(store, [("rival", None, 4)])  # due before the child
        batch = await store.claim_and_load("w", ["q"], LEASE, limit=1, snapshot_version="v")
        assert [each.claim.task_id for each in batch] == ["parent.c.1"]  # priority 5 first

    async def test_clearing_settings_lifts_every_limit(self, store: Store) -> None:
        queues = queue_settings_store(store)
        await queues.set_queue("q", QueueChange(concurrency=1, paused=True))
        await created_in_order(store, [("a", None, 0), ("b", None, 0)])
        assert await claim_ids(store, 5) == set()
        assert await queues.clear_queue("q")
        assert not await queues.clear_queue("q")
        assert await claim_ids(store, 5) == {"a", "b"}

    async def test_a_change_keeps_what_it_does_not_name(self, store: Store) -> None:
        queues = queue_settings_store(store)
        await queues.set_queue("q", QueueChange(concurrency=4, rate=Rate(10, 1.0)))
        after = await queues.set_queue("q", QueueChange(per_key_concurrency=2, paused=True))
        settings = after.settings
        assert (settings.concurrency, settings.per_key_concurrency) == (4, 2)
        assert settings.rate == Rate(10, 1.0) and settings.paused and after.has_settings

    async def test_the_overview_counts_running_per_key(self, store: Store) -> None:
        queues = queue_settings_store(store)
        specs = [("a1", "A", 0), ("a2", "A", 0), ("b1", "B", 0), ("n", None, 0)]
        await created_in_order(store, specs)
        await claim_ids(store, 3)
        [overview] = await queues.queue_overview(["q"])
        assert not overview.has_settings and overview.running == 3
        assert overview.claimable == 1 and dict(overview.running_by_key) == {"A": 2, "B": 1}

    async def test_the_overview_counts_tasks_scheduled_later_apart(self, store: Store) -> None:
        now = await store.clock()
        assert await store.create_task(created("later", "q", ready_at=now + timedelta(hours=1)))
        await created_in_order(store, [("held", None, 0), ("due", None, 0)])
        assert await claim_ids(store, 1) == {"held"}  # a claim's lease end is no schedule
        [overview] = await queue_settings_store(store).queue_overview(["q"])
        assert (overview.claimable, overview.running, overview.scheduled) == (1, 1, 1)
        assert overview.unfinished == 3  # ready, running and scheduled alike
        assert overview.changed_at is None
        await queue_settings_store(store).set_queue("q", QueueChange(paused=True))
        [paused] = await queue_settings_store(store).queue_overview(["q"])
        assert paused.changed_at is not None and paused.changed_at >= now - timedelta(minutes=1)

    async def test_created_and_finished_tasks_are_counted_per_period(self, store: Store) -> None:
        since = await store.clock()
        await created_in_order(store, [(f"t{n}", None, 0) for n in range(4)])
        for status in [TaskStatus.DONE, TaskStatus.DONE, TaskStatus.FAILED]:
            claim = await store.claim("w", ["q"], LEASE)
            assert claim is not None
            await store.append(claim, 1, [], next_state=Finish(status))
        queues = queue_settings_store(store)
        counts = await queues.activity_per_period(since - timedelta(hours=1), 3600, ["q"])
        assert sum(c.done for c in counts) == 2 and sum(c.failed for c in counts) == 1
        assert {c.queue for c in counts} == {"q"} and sum(c.cancelled for c in counts) == 0
        assert sum(c.created for c in counts) == 4
        [overview] = await queues.queue_overview(["q"])
        assert overview.unfinished == 1
        for count in counts:  # periods start on a whole hour, the last one holds now
            assert count.start.timestamp() % 3600 == 0
            assert since - timedelta(hours=2) < count.start <= await store.clock()
        later = await queues.activity_per_period(await store.clock() + timedelta(hours=2), 60)
        assert later == []
        with pytest.raises(ConfigError):
            await queues.activity_per_period(since, 0)

    @pytest.mark.parametrize(
        "change",
        [
            QueueChange(concurrency=0),
            QueueChange(concurrency=-1),
            QueueChange(per_key_concurrency=0),
            QueueChange(concurrency=10**9),
        ],
    )
    async def test_a_bad_setting_changes_nothing(self, store: Store, change: QueueChange) -> None:
        queues = queue_settings_store(store)
        await queues.set_queue("q", QueueChange(concurrency=2))
        with pytest.raises(ConfigError):
            await queues.set_queue("q", change)
        [overview] = await queues.queue_overview(["q"])
        assert overview.settings.concurrency == 2 and overview.settings.per_key_concurrency is None

    @pytest.mark.parametrize("name", ["", "x" * 600, "nul\x00"])
    async def test_a_bad_queue_name_is_refused(self, store: Store, name: str) -> None:
        with pytest.raises(PayloadError):
            await queue_settings_store(store).set_queue(name, QueueChange(concurrency=1))

    async def test_a_claim_race_never_overshoots_the_limit(self, store: Store) -> None:
        await queue_settings_store(store).set_queue("q", QueueChange(concurrency=3))
        await created_in_order(store, [(f"t{n}", None, 0) for n in range(30)])
        results = await asyncio.gather(*(claim_ids(store, 5, f"w{n}") for n in range(8)))
        assert sum(len(ids) for ids in results) == 3
        running = await store.list_tasks(status=TaskStatus.RUNNING, queue="q")
        assert len(running) == 3
