"""The contract for cron: each (schedule, slot) fires once however many schedulers race,
overlap rules, marks, history, and the next due time."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from noeta.backends.stores import open_store
from noeta.core.ports.queue_settings import QueueChange, queue_settings_store
from noeta.core.ports.store import (
    CronFire,
    Delivery,
    Finish,
    FireOutcome,
    NewEvent,
    Store,
    Wait,
    cron_message_key,
)
from noeta.testing.store_contract.fixtures import LEASE, created

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


class CronContract:
    """Firing cron slots, and the scheduler's wake-up of due tasks."""

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

    async def test_a_cron_task_keeps_its_key_and_priority(self, store: Store) -> None:
        await queue_settings_store(store).set_queue("q", QueueChange(per_key_concurrency=1))
        for n, key in enumerate(["k", "k", None]):
            task = created(f"fired{n}", "q", concurrency_key=key, priority=n)
            assert await store.fire_cron(CronFire(f"s{n}", minutes(n), task)) == FireOutcome.CREATED
        first = await store.claim_and_load("w", ["q"], LEASE, limit=1, snapshot_version="v")
        assert [each.claim.task_id for each in first] == ["fired2"]  # the highest priority
        rest = await store.claim_and_load("w", ["q"], LEASE, limit=5, snapshot_version="v")
        assert [each.claim.task_id for each in rest] == ["fired1"]  # fired0: key k is full

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

    async def test_cron_schedules_are_the_registered_names_sorted(self, store: Store) -> None:
        assert await store.cron_schedules() == []
        await store.cron_marks(["weekly", "daily"], minutes(0))
        await store.cron_marks(["hourly"], minutes(1))
        assert await store.cron_schedules() == ["daily", "hourly", "weekly"]

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
