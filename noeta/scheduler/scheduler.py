"""The scheduler's loop: cron slots fired once each, and timers announced when due.

Any number of schedulers may run against one store. None is a leader: each computes the
same slots and asks the store to fire each (`Store.fire_cron`), and the store's unique
(schedule, slot) key lets exactly one of them create the task or deliver the message.
A dead scheduler delays fires and never loses them: the store keeps each schedule's mark
(the latest slot handled), and the next scheduler to look catches up from it, by policy.

Timers (ScheduleWakeup, delayed tasks) are fired by the task's own next claim; what the
scheduler adds is promptness: it NOTIFYs idle workers when a task falls due
(`Store.wake_due`), so a wake-up runs within about a second instead of a whole poll.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from noeta.client import job_tasks
from noeta.core import failpoints
from noeta.core.errors import ConfigError, NoetaError, StoreError
from noeta.core.ports.store import (
    CronFire,
    Delivery,
    FireOutcome,
    NewEvent,
    NewTask,
    Store,
    cron_message_key,
)
from noeta.core.retry import backoff_seconds
from noeta.core.rules import events
from noeta.health.liveness import Liveness
from noeta.scheduler.cronfile import JobAction, MessageAction, Schedule, TaskAction
from noeta.scheduler.slots import next_slot, slots_between

log = logging.getLogger("noeta.scheduler")

# A slot the scheduler reaches more than this after its time was missed (no scheduler
# ran): the schedule's `missed` policy decides. Within it, the slot is on time.
MISSED_AFTER = timedelta(seconds=60)
# The longest sleep between looks: bounds how late a timer set meanwhile is announced.
TICK_SECONDS = 1.0
# On start, tasks that fell due this long ago are announced too (workers poll anyway).
FIRST_LOOK_BACK = timedelta(minutes=5)
# After store errors in a row, wait longer each time (jittered), but never longer than
# this: a store back from an outage is seen within it, and a slot that fell due
# meanwhile is still fired on time (MISSED_AFTER).
RETRY_CAP_SECONDS = 10.0
TICK = "scheduler tick"

ToolsFor = Callable[[tuple[str, ...] | None], tuple[str, ...]]


def check_job_schedules(schedules: Sequence[Schedule]) -> None:
    """Every `job:` names a function the loaded plugins declare, with input that fits it:
    refused at start (and on reload), not at the first fire."""
    for schedule in schedules:
        action = schedule.action
        if isinstance(action, JobAction):
            try:
                job_tasks.job_input(job_tasks.job_tool(action.name), action.input)
            except NoetaError as error:
                raise ConfigError(
                    f"{schedule.source}: schedule {schedule.name!r}: {error}"
                ) from None


def task_id_for(schedule: str, slot: datetime) -> str:
    """A fire's task id: the same on every scheduler, readable in `noeta tasks`."""
    return f"cron-{schedule}-{slot.astimezone(UTC):%Y%m%dT%H%MZ}"


@dataclass
class Scheduler:
    store: Store
    schedules: Sequence[Schedule]
    # The tool names a cron task gets, from its `plugins` (None: every configured plugin).
    tools_for: ToolsFor = lambda plugins: ()
    since: datetime | None = None  # the end of the last window announced to workers
    liveness: Liveness = field(default_factory=Liveness)  # its tick's last turn, for /livez

    async def run(self, stop: asyncio.Event, reload: asyncio.Event | None = None) -> None:
        """Look, fire, sleep until the next thing is due (at most TICK_SECONDS); until
        `stop`. `reload` set: the caller swapped `schedules`; look again at once."""
        failures = 0  # store errors in a row
        while not stop.is_set():
            self.liveness.turned(TICK, 0.0)  # a look: a few statements, each bounded
            try:
                wait = await self.tick()
                failures = 0
            except StoreError as error:  # unreachable, read-only, a timeout: never fatal
                failures += 1
                wait = min(RETRY_CAP_SECONDS, backoff_seconds(failures, None, random.random()))
                log.warning("scheduler: %s; looking again in %.1f s", error, wait)
            self.liveness.turned(TICK, wait)
            waiters = [asyncio.ensure_future(stop.wait())]
            if reload is not None:
                waiters.append(asyncio.ensure_future(reload.wait()))
            await asyncio.wait(waiters, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            for waiter in waiters:
                waiter.cancel()
            if reload is not None:
                reload.clear()
        self.liveness.forget(TICK)

    async def tick(self) -> float:
        """One look: announce due tasks, fire due slots; the seconds until the next look."""
        if self.since is None:  # the first window is wider, on the store's clock
            self.since = await self.store.clock() - FIRST_LOOK_BACK
        now, next_due = await self.store.wake_due(self.since)
        self.since = now
        enabled = [s for s in self.schedules if s.enabled]
        disabled = [s.name for s in self.schedules if not s.enabled]
        marks = await self.store.cron_marks([s.name for s in self.schedules], now, advance=disabled)
        wake_at = [now + timedelta(seconds=TICK_SECONDS)]
        if next_due is not None:
            wake_at.append(next_due)
        for schedule in enabled:
            mark = marks.get(schedule.name)
            if mark is None:
                continue  # registered by another scheduler just now: next look
            await self._catch_up(schedule, mark, now)
            upcoming = next_slot(schedule.cron, schedule.timezone, max(mark, now))
            if upcoming is not None:
                wake_at.append(upcoming)
        return max(0.0, (min(wake_at) - now).total_seconds())

    async def _catch_up(self, schedule: Schedule, mark: datetime, now: datetime) -> None:
        bound = schedule.max_catch_up if schedule.missed == "run_all" else 1
        # One more than can run: to know whether slots were left out.
        due = slots_between(schedule.cron, schedule.timezone, mark, now, bound + 1)
        on_time = [slot for slot in due if now - slot <= MISSED_AFTER]
        missed = [slot for slot in due if now - slot > MISSED_AFTER]
        if missed:
            more = "or more " if len(due) > bound else ""
            told = f"{len(missed)} {more}slot(s) missed while no scheduler ran"
            match schedule.missed:
                case "skip":
                    await self._fire(schedule, missed[-1], f"{told}; policy skip", run=False)
                case "run_once":
                    await self._fire(schedule, missed[-1], f"{told}; ran the latest once")
                case "run_all":
                    for slot in missed[-bound:]:
                        await self._fire(schedule, slot, f"{told}; catching up")
        for slot in on_time:
            await self._fire(schedule, slot, "")

    async def _fire(
        self, schedule: Schedule, slot: datetime, detail: str, run: bool = True
    ) -> None:
        action = self._action(schedule, slot) if run else None
        fire = CronFire(schedule.name, slot, action, schedule.overlap, detail)
        outcome = await self.store.fire_cron(fire)
        if outcome is not FireOutcome.ALREADY:
            made = ""
            if isinstance(action, NewTask) and outcome is FireOutcome.CREATED:
                made = f" (task {action.id})"
            elif isinstance(action, Delivery) and outcome is FireOutcome.DELIVERED:
                made = f" (message to {action.task_id})"
            log.info(
                "cron %s: slot %s %s%s%s",
                schedule.name,
                slot.astimezone(UTC).isoformat(timespec="minutes"),
                outcome.value,
                made,
                f": {detail}" if detail else "",
            )
        await failpoints.hit("cron.after_fire")

    def _action(self, schedule: Schedule, slot: datetime) -> NewTask | Delivery:
        match schedule.action:
            case TaskAction(prompt=prompt, model=model, queue=queue, plugins=plugins):
                created = events.TaskCreated(
                    model=model,
                    prompt=prompt,
                    tools=self.tools_for(plugins),
                    **dict(schedule.action.budget),  # type: ignore[arg-type]
                )
                first = [NewEvent(*events.encode(created))]
                key, priority = schedule.action.key, schedule.action.priority
                return NewTask(
                    task_id_for(schedule.name, slot),
                    first,
                    queue,
                    concurrency_key=key,
                    priority=priority,
                )
            case MessageAction(task=task, text=text):
                key = cron_message_key(schedule.name, slot)
                return Delivery(task, {"text": text}, key)
            case JobAction(name=name, input=given, queue=queue, key=key, priority=priority):
                tool = job_tasks.job_tool(name)
                checked = job_tasks.job_input(tool, given)
                job = job_tasks.job_task(
                    task_id_for(schedule.name, slot), tool, checked, queue, None
                )
                return replace(job, concurrency_key=key, priority=priority)
        raise NoetaError(f"schedule {schedule.name}: unknown action {schedule.action!r}")
