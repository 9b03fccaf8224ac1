"""Real `noeta scheduler` processes: racing over the same slots, killed mid catch-up,
reloading on SIGHUP; and a timer that falls due while the worker that set it is dead."""

from __future__ import annotations

import functools
import itertools
import json
import signal
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from noeta.core.ports.store import FireOutcome, NewEvent, NewTask, Store
from noeta.core.rules import events
from noeta.scheduler.scheduler import task_id_for
from tests.worker.conftest import (
    NoetaProcess,
    WorkerProcess,
    log_types,
    status_of,
    store,
    until,
    workers,
)

__all__ = ["store", "workers"]  # the fixtures


class SchedulerProcess(NoetaProcess):
    def __init__(self, url: str, cron: Path, folder: Path, name: str, failpoints: str = "") -> None:
        arguments = ["scheduler", "--cron", str(cron)]  # the URL, with its password, in env
        super().__init__(arguments, name, folder, failpoints=failpoints, env={"NOETA_STORE": url})


@pytest.fixture
def schedulers(tmp_path: Path) -> Iterator[Callable[..., SchedulerProcess]]:
    started: list[SchedulerProcess] = []

    def start(url: str, cron: Path, name: str, **options: Any) -> SchedulerProcess:
        process = SchedulerProcess(url, cron, tmp_path, name, **options)
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


def cron_file(folder: Path, **schedule: Any) -> Path:
    entry = {
        "name": "s",
        "schedule": "* * * * *",
        "task": {"prompt": "tick", "model": "scripted:tick.yaml"},
        **schedule,
    }
    path = folder / "cron.yaml"
    path.write_text(json.dumps({"schedules": [entry]}))  # JSON is YAML
    return path


async def fired(store: Store, name: str = "s") -> list[tuple[Any, FireOutcome]]:
    return [(r.slot, r.outcome) for r in reversed(await store.cron_history(name, 1000))]


def consecutive_minutes(slots: list[Any]) -> bool:
    return all(b - a == timedelta(minutes=1) for a, b in itertools.pairwise(slots))


async def test_two_schedulers_racing_over_100_slots_fire_each_exactly_once(
    store: Store, postgres_url: str, tmp_path: Path, schedulers: Callable[..., SchedulerProcess]
) -> None:
    cron = tmp_path / "cron.yaml"
    cron.write_text("schedules: []\n")
    racers = [schedulers(postgres_url, cron, f"scheduler-{n}") for n in range(2)]
    for racer in racers:
        await until(functools.partial(started, racer), f"{racer.name} started")
    # As if a scheduler last looked at "s" 100 minutes ago: 100 slots to fire. Both learn
    # of it by the same reload, so they start catching up together.
    await store.cron_marks(["s"], await store.clock() - timedelta(minutes=100))
    cron_file(tmp_path, missed="run_all", max_catch_up=100, overlap="allow")
    for racer in racers:
        racer.signal(signal.SIGHUP)

    async def caught_up() -> bool:
        return len(await fired(store)) >= 100

    await until(caught_up, "100 slots were handled", within=60)
    for racer in racers:
        racer.signal(signal.SIGTERM)
    assert [await racer.exit_code() for racer in racers] == [0, 0]

    history = await fired(store)
    slots = [slot for slot, _ in history]
    assert len(history) >= 100 and consecutive_minutes(slots)
    assert {outcome for _, outcome in history} == {FireOutcome.CREATED}
    tasks = sorted(task.id for task in await store.list_tasks(limit=1000))
    assert tasks == sorted(task_id_for("s", slot) for slot in slots)
    # Each creation was one scheduler's: the two logs together name every task once.
    created = [line for r in racers for line in r.log().splitlines() if " created (task " in line]
    assert len(created) == len(tasks)


async def started(process: NoetaProcess) -> bool:
    return "scheduler: " in process.log()


async def test_a_scheduler_killed_mid_catch_up_is_caught_up_by_the_next(
    store: Store, postgres_url: str, tmp_path: Path, schedulers: Callable[..., SchedulerProcess]
) -> None:
    cron = cron_file(tmp_path, missed="run_all", max_catch_up=5, overlap="allow")
    await store.cron_marks(["s"], await store.clock() - timedelta(minutes=10))
    first = schedulers(postgres_url, cron, "first", failpoints="cron.after_fire=kill@2")
    assert await first.exit_code() == -signal.SIGKILL
    assert [outcome for _, outcome in await fired(store)] == [FireOutcome.CREATED] * 2

    second = schedulers(postgres_url, cron, "second")

    async def caught_up() -> bool:
        return len(await fired(store)) >= 5

    await until(caught_up, "the second scheduler caught up", within=30)
    second.process.send_signal(signal.SIGTERM)
    assert await second.exit_code() == 0
    history = await fired(store)
    slots = [slot for slot, _ in history]
    assert consecutive_minutes(slots) and len(slots) >= 5
    assert {outcome for _, outcome in history} == {FireOutcome.CREATED}
    assert len(await store.list_tasks(limit=100)) == len(slots)


async def test_a_broken_cron_file_stops_the_start_and_a_broken_reload_keeps_the_last_good(
    store: Store, postgres_url: str, tmp_path: Path, schedulers: Callable[..., SchedulerProcess]
) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("schedules:\n  - name: x\n    schedule: */5 * * * *\n")
    refused = schedulers(postgres_url, broken, "refused")
    assert await refused.exit_code() == 1
    (line,) = refused.log().strip().splitlines()
    assert line.startswith("noeta: error: ") and "broken.yaml" in line and "line 3" in line

    cron = cron_file(tmp_path)
    running = schedulers(postgres_url, cron, "running")

    async def logged(text: str) -> bool:
        return text in running.log()

    await until(lambda: logged("scheduler: 1 schedules"), "the scheduler started")
    cron.write_text("schedules: [\n")
    running.process.send_signal(signal.SIGHUP)
    await until(lambda: logged("cron reload failed; keeping the 1 schedules"), "a failed reload")
    cron.write_text(cron_file(tmp_path).read_text().replace('"s"', '"t"'))
    running.process.send_signal(signal.SIGHUP)
    await until(lambda: logged("cron reloaded: 1 schedules"), "a good reload")

    async def registered() -> bool:
        # The reload is logged before the next tick registers the schedule. Read, not
        # cron_marks: that registers what it names, and racing the tick it returned nothing.
        return "t" in await store.cron_schedules()

    await until(registered, "the reloaded schedule registered by the scheduler")
    running.process.send_signal(signal.SIGTERM)
    assert await running.exit_code() == 0


async def test_a_timer_falls_due_while_the_worker_that_set_it_is_dead(
    store: Store,
    postgres_url: str,
    tmp_path: Path,
    workers: Callable[..., WorkerProcess],
    schedulers: Callable[..., SchedulerProcess],
) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("schedules: []\n")
    schedulers(postgres_url, empty, "scheduler")
    # Long polls: between announcements the workers sleep.
    pair = {name: workers(postgres_url, name, poll=120.0) for name in ("a", "b")}
    wake = {"id": "w1", "name": "ScheduleWakeup", "input": {"prompt": "check", "delay_seconds": 3}}
    script = tmp_path / "timer.yaml"
    script.write_text(
        json.dumps({"replies": [{"tool_calls": [wake]}, {"text": "later"}, {"text": "checked"}]})
    )
    created = events.TaskCreated(model=f"scripted:{script}", prompt="go", tools=("ScheduleWakeup",))
    await store.create_task(NewTask("timer", [NewEvent(*events.encode(created))]))

    async def waiting() -> bool:
        return await status_of(store, "timer") == "waiting"

    await until(waiting, "the timer was set")
    record = await store.get_task("timer")
    assert record is not None and record.owner in pair and record.ready_at is not None
    setter = pair.pop(record.owner)
    setter.process.kill()  # dead before the timer is due
    assert await setter.exit_code() == -signal.SIGKILL

    async def finished() -> bool:
        return await status_of(store, "timer") == "done"

    await until(finished, "the woken task finished", within=60)
    (survivor,) = pair
    log = await store.read_log("timer")
    assert (await log_types(store, "timer")).count("WokenUp") == 1
    woken = next(event for event in log if event.type == "WokenUp")
    assert woken.created_at >= record.ready_at
    final = await store.get_task("timer")
    assert final is not None and final.owner == survivor


async def test_a_scheduler_at_warning_still_says_it_started_and_stopped(
    postgres_url: str, tmp_path: Path
) -> None:
    # As Celery's banner: `--log-level warning` drops the lines of each firing, not these.
    cron = tmp_path / "cron.yaml"
    cron.write_text("schedules: []\n")
    arguments = ["scheduler", "--cron", str(cron)]
    env = {"NOETA_STORE": postgres_url, "NOETA_LOG_LEVEL": "warning"}
    quiet = NoetaProcess(arguments, "quiet", tmp_path, env=env)
    try:
        await until(functools.partial(started, quiet), "the quiet scheduler started")
        quiet.signal(signal.SIGTERM)
        assert await quiet.exit_code() == 0
    finally:
        quiet.stop()
    said = [line for line in quiet.log().splitlines() if " INFO " in line]
    assert [line.split(" INFO ", 1)[1] for line in said] == [
        f"noeta.scheduler: scheduler: 0 schedules from {cron}",
        "noeta.scheduler: scheduler: stopped",
    ], quiet.log()
