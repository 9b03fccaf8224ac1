"""The scheduler's loop in-process on both stores: missed-fire policies, on-time fires,
disabled schedules, overlap, and a message to an interactive task."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from noeta.backends.stores import open_store
from noeta.core.ports.store import FireOutcome, Store
from noeta.core.rules import events
from noeta.scheduler.cronfile import MessageAction, Schedule, TaskAction
from noeta.scheduler.scheduler import MISSED_AFTER, Scheduler, task_id_for
from noeta.testing.store_contract import created


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    store = await open_store(store_url, migrate=True)
    yield store
    await store.close()


def every_minute(name: str = "s", **options: Any) -> Schedule:
    action = options.pop("action", TaskAction(prompt="tick", model="scripted:x.yaml"))
    return Schedule(name, "* * * * *", "UTC", action, **options)


def minute_floor(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(second=0, microsecond=0)


async def history(store: Store, name: str = "s") -> list[tuple[datetime, FireOutcome]]:
    return [(r.slot, r.outcome) for r in reversed(await store.cron_history(name, 1000))]


async def down_since(store: Store, minutes: int, name: str = "s") -> datetime:
    """As if a scheduler last looked `minutes` ago and none has run since."""
    now = await store.clock()
    await store.cron_marks([name], now - timedelta(minutes=minutes))
    return now


def minute_slots(after: datetime, until: datetime) -> list[datetime]:
    slot = minute_floor(after) + timedelta(minutes=1)
    slots = []
    while slot <= until:
        slots.append(slot)
        slot += timedelta(minutes=1)
    return slots


@pytest.mark.parametrize("missed", ["skip", "run_once", "run_all"])
async def test_missed_slots_follow_the_policy(store: Store, missed: str) -> None:
    down = await down_since(store, 10)
    scheduler = Scheduler(store, [every_minute(missed=missed, max_catch_up=3, overlap="allow")])
    await scheduler.tick()
    now = scheduler.since  # the store's time the scheduler looked at
    assert now is not None
    slots = minute_slots(down - timedelta(minutes=10), now)
    missed_slots = [slot for slot in slots if now - slot > MISSED_AFTER]
    on_time = [(slot, FireOutcome.CREATED) for slot in slots if now - slot <= MISSED_AFTER]
    assert len(missed_slots) >= 9
    expected = {
        "skip": [(missed_slots[-1], FireOutcome.MISSED)],
        "run_once": [(missed_slots[-1], FireOutcome.CREATED)],
        "run_all": [(slot, FireOutcome.CREATED) for slot in missed_slots[-3:]],
    }[missed]
    fired = await history(store)
    assert fired == expected + on_time
    tasks = {task.id for task in await store.list_tasks(limit=100)}
    created_slots = [slot for slot, outcome in fired if outcome is FireOutcome.CREATED]
    assert tasks == {task_id_for("s", slot) for slot in created_slots}


async def test_a_second_look_fires_nothing_again(store: Store) -> None:
    await down_since(store, 5)
    scheduler = Scheduler(store, [every_minute(missed="run_all", overlap="allow")])
    await scheduler.tick()
    before = await history(store)
    await scheduler.tick()
    await Scheduler(store, [every_minute(missed="run_all", overlap="allow")]).tick()
    after = await history(store)
    assert after[: len(before)] == before and len(after) - len(before) <= 1  # a new minute
    assert len({slot for slot, _ in after}) == len(after)


async def test_a_new_schedule_starts_from_now_and_a_disabled_one_never_fires(
    store: Store,
) -> None:
    scheduler = Scheduler(store, [every_minute("new"), every_minute("off", enabled=False)])
    wait = await scheduler.tick()
    assert await history(store, "new") == [] and await history(store, "off") == []
    assert 0 <= wait <= 1.0
    # Disabled for ten minutes, then enabled: its quiet time is not missed slots.
    marks = await store.cron_marks(["off"], await store.clock() - timedelta(minutes=10))
    assert marks["off"] == scheduler.since  # advanced to the look, not left behind
    await Scheduler(store, [every_minute("off", missed="run_all")]).tick()
    assert all(slot > marks["off"] for slot, _ in await history(store, "off"))


async def test_overlap_skip_holds_catch_up_fires_while_the_first_task_runs(
    store: Store,
) -> None:
    await down_since(store, 4)
    await Scheduler(store, [every_minute(missed="run_all", overlap="skip")]).tick()
    outcomes = [outcome for _, outcome in await history(store)]
    assert outcomes[0] is FireOutcome.CREATED
    assert set(outcomes[1:]) == {FireOutcome.SKIPPED_OVERLAP}
    assert len(await store.list_tasks()) == 1


async def test_a_message_schedule_delivers_to_its_task(store: Store) -> None:
    await store.create_task(created("chat-1"))
    await down_since(store, 3)
    action = MessageAction(task="chat-1", text="any news?")
    await Scheduler(store, [every_minute(action=action, missed="run_once")]).tick()
    outcomes = [outcome for _, outcome in await history(store)]
    assert outcomes[0] is FireOutcome.DELIVERED
    inbox = await store.read_inbox("chat-1")
    assert inbox[0].payload == {"text": "any news?"}
    assert inbox[0].dedupe_key is not None and inbox[0].dedupe_key.startswith("cron:s:")


async def test_a_task_schedule_gives_each_task_its_budget(store: Store) -> None:
    budget = (("budget_cost", "0.50"), ("budget_tokens", 9000), ("on_budget", "ask"))
    action = TaskAction(prompt="tick", model="scripted:x.yaml", budget=budget)
    await down_since(store, 1)
    await Scheduler(store, [every_minute(action=action, overlap="allow")]).tick()
    tasks = await store.list_tasks(limit=10)
    assert tasks
    for task in tasks:
        [first, *_] = await store.read_log(task.id)
        created = events.decode(first.type, first.data)
        assert isinstance(created, events.TaskCreated)
        budget = (created.budget_cost, created.budget_tokens, created.on_budget)
        assert budget == ("0.50", 9000, "ask")
