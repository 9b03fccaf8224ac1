"""Running one claimed task: fold the log, do what `next_action` says, append, repeat.

Every step is durable before its effect: `ModelCalled` before the request, `ToolStarted`
before the tool. The loop ends when the task finishes, hands itself back (waits), or
must be left alone (a newer version's log, an unreadable one). Store errors (`Conflict`,
`StoreUnavailable`, `CommitUnknown`) end it at once: the claim is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from noeta.core import events as ev
from noeta.core import failpoints, wakeups
from noeta.core.errors import NoetaError, StoreError
from noeta.core.fold import LoggedEvent, TaskState, fold
from noeta.core.gates import Gate
from noeta.core.model_limits import ModelBudget
from noeta.core.next_action import (
    AwaitAnswer,
    AwaitMessage,
    AwaitSubtasks,
    CallModel,
    EndTurn,
    FindWhyCut,
    FinishTask,
    LeaveForNewerVersion,
    LeavePluginMissing,
    LeaveUnreadable,
    PinPlugins,
    RecoverCalls,
    RunTools,
    Stop,
    check_pins,
    next_action,
    on_internal_error,
)
from noeta.core.pin import Pin
from noeta.core.retry import Sleep
from noeta.core.runner import (
    calls,
    children,
    grace,
    model_budget,
    model_call,
    model_cuts,
    taking,
)
from noeta.core.runner.log import load_for_run, save_snapshot, snapshot_version
from noeta.core.runner.model_call import Providers
from noeta.core.runner.plugin_hooks import HookFailed, HookPlugins, Hooks
from noeta.core.store import (
    DEFAULT_QUEUE,
    Claim,
    Continue,
    Delivery,
    Finish,
    InboxEntry,
    LoadedTask,
    NewEvent,
    NewTask,
    NextState,
    Store,
    TaskStatus,
    Wait,
    WaitHolding,
)
from noeta.core.task import LOAD_ATTEMPTS, LoadAttempts
from noeta.core.task_id import workspace_folder
from noeta.core.tool import Jobs, Tool
from noeta.observability import tracing

log = logging.getLogger(__name__)


CANCEL_CHECK_SECONDS = 2.0


def answer_key(call_id: str) -> str:
    """The dedupe key of a person's answer to an asked call (`noeta answer`)."""
    return f"answer:{call_id}"


Outcome = Literal[
    "finished", "waiting", "holding", "left_for_newer", "unreadable", "plugin_missing"
]


@dataclass(frozen=True, slots=True)
class RunResult:
    outcome: Outcome
    state: TaskState


@dataclass
class TaskRunner:
    store: Store
    providers: Providers
    tools: Mapping[str, Tool] = field(default_factory=dict)
    sleep: Sleep = asyncio.sleep
    snapshot_every: int = 200
    load_attempts: LoadAttempts = field(default_factory=LoadAttempts)
    agent: str = ""
    # Each task's files live in <workspaces>/<task id> (`workspace_folder`); "" gives
    # tools no file access.
    workspaces: str = ""
    gates: Sequence[Gate] = ()
    # The worker's background jobs; None: Bash's run_in_background is refused.
    jobs: Jobs | None = None
    # The plugins this worker has, as pins; None: do not check (tests, noeta run alone).
    pins: tuple[Pin, ...] | None = None
    # The plugins whose hooks run (before_append, on_event, delivered_through).
    plugins: Sequence[object] = ()
    # What an Agent call may name besides its task's own model (ADR-0076).
    subagent_models: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.hook_plugins = HookPlugins.of(self.plugins)

    def workspace_for(self, task_id: str) -> str:
        if not self.workspaces:
            return ""
        return os.path.join(self.workspaces, workspace_folder(task_id))

    @property
    def snapshot_version(self) -> str:
        """The version of the snapshots this runner reads and writes (what a claim that
        reads the task with it asks for)."""
        return snapshot_version(self.agent)

    async def run(self, claim: Claim, loaded: LoadedTask | None = None) -> RunResult:
        """Run the claimed task; `loaded`: the task as the claim read it (of this runner's
        snapshot version), else the run reads it first."""
        version = self.snapshot_version
        state, inbox = await load_for_run(self.store, claim.task_id, version, loaded)
        run = _Run(self, claim, state, version, tracing.begin_attempt(claim, state))
        if any(taking.kind_of(entry.payload) == "cancel" for entry in inbox):
            run.cancel_checked_at = -math.inf  # asked already: look before anything else
        else:
            run.cancel_checked_at = time.monotonic()  # just looked, with the load
        try:
            result = await run.loop()
        except BaseException as error:
            run.trace.end("error", error)
            raise
        run.trace.end(result.state.finished or result.outcome)
        return result


class _Run:
    """One claim's run of a task (the RunContext of calls.py); `state` always equals the
    fold of what landed."""

    def __init__(
        self,
        runner: TaskRunner,
        claim: Claim,
        state: TaskState,
        version: str,
        trace: tracing.Attempt = tracing.NO_ATTEMPT,
    ) -> None:
        self.runner = runner
        self.trace = trace
        self.store = runner.store
        self.claim = claim
        self.state = state
        self.version = version
        self.snapshot_seq = state.last_seq
        # Events that ride with the next append (pins: no round trip of their own).
        self.pending: list[ev.Event] = []
        self.cancel_checked_at = -math.inf
        self._queue = ""
        self.hooks = Hooks(runner.hook_plugins)

    # --- the RunContext the steps in calls.py see ---------------------------------------

    @property
    def task_id(self) -> str:
        return self.claim.task_id

    @property
    def tools(self) -> Mapping[str, Tool]:
        return self.runner.tools

    @property
    def gates(self) -> Sequence[Gate]:
        return self.runner.gates

    @property
    def jobs(self) -> Jobs | None:
        return self.runner.jobs

    @property
    def providers(self) -> Providers:
        return self.runner.providers

    @property
    def sleep(self) -> Sleep:
        return self.runner.sleep

    @property
    def workspace(self) -> str:
        return self.runner.workspace_for(self.task_id)

    async def clock(self) -> datetime:
        return await self.store.clock()

    @property
    def subagent_models(self) -> tuple[str, ...]:
        return self.runner.subagent_models

    async def model_problem(self, spec: str) -> str:
        try:
            await self.runner.providers.provider_for(spec)
        except NoetaError as error:
            return str(error)
        return ""

    async def queue(self) -> str:
        if not self._queue:
            record = await self.store.get_task(self.task_id)
            self._queue = record.queue if record else DEFAULT_QUEUE
        return self._queue

    def _burst(self, action: object) -> contextlib.AbstractAsyncContextManager[None]:
        """A step that only reads and writes the store runs on one store connection; one
        that calls a model or runs tools takes one per statement (none held meanwhile)."""
        holding = getattr(self.store, "holding", None)  # PostgreSQL's; sqlite has none
        if holding is None or isinstance(action, CallModel | RunTools | RecoverCalls):
            return contextlib.nullcontext()
        burst: contextlib.AbstractAsyncContextManager[None] = holding()
        return burst

    async def loop(self) -> RunResult:
        if self.runner.pins is not None:
            stop = await self._check_pins(self.runner.pins)
            if stop is not None:
                return stop
        if self.hooks.on_event and not self.state.finished:
            await self._redeliver()
        while True:
            action = next_action(self.state)
            async with self._burst(action):
                try:
                    match action:
                        case Stop():
                            return RunResult("finished", self.state)
                        case LeaveForNewerVersion(event_type=event_type):
                            log.warning(
                                "task %s: its log has a %s event from a newer noeta; leaving it",
                                self.task_id,
                                event_type,
                            )
                            return RunResult("left_for_newer", self.state)
                        case LeaveUnreadable(reason=reason):
                            if await self._give_up_loading(f"unreadable_log: {reason}"):
                                return RunResult("finished", self.state)
                            return RunResult("unreadable", self.state)
                        case AwaitAnswer(call_id=call_id):
                            inbox = await self._inbox()
                            if await self._cancel_if_asked(inbox):
                                return RunResult("finished", self.state)
                            if not await taking.take_answer(self, call_id, inbox):
                                prefix = answer_key(call_id)
                                await self.append([], next_state=Wait(wake_on_prefix=prefix))
                                return RunResult("waiting", self.state)
                        case AwaitMessage():
                            # One read of the inbox serves every check of this pass.
                            inbox = await self._inbox()
                            if await self._cancel_if_asked(inbox):
                                return RunResult("finished", self.state)
                            if (
                                await children.take_late_handback(self, inbox)
                                or await taking.take_job_result(self, inbox)
                                or await taking.record_a_lost_job(self, inbox)
                                or await taking.take_message(self, inbox)
                                or await self._wake_if_due()
                            ):
                                continue
                            if taking.jobs_running_here(self):
                                # Keep the claim (and its renewals): the job's result comes here.
                                await self.append([], next_state=WaitHolding())
                                return RunResult("holding", self.state)
                            # Claimable again at the next wake-up's due time, or by a delivery.
                            await self.append(
                                [], next_state=Wait(until=wakeups.next_due(self.state))
                            )
                            return RunResult("waiting", self.state)
                        case AwaitSubtasks():
                            inbox = await self._inbox()
                            if await self._cancel_if_asked(inbox):
                                return RunResult("finished", self.state)
                            if not await children.take_handbacks(self, action, inbox):
                                return RunResult("waiting", self.state)
                        case EndTurn() | FinishTask():
                            await self.settle([], action)
                        case CallModel() | FindWhyCut():
                            if await self._cancelled_before_step():
                                return RunResult("finished", self.state)
                            await self._model_step(action)
                        case RunTools(calls=to_run):
                            # A cancel stops calls not yet started: a queued job's function
                            # never runs (Celery's revoke). One already started (RecoverCalls)
                            # is settled first, so nothing it made is left behind.
                            if await self._cancelled_before_step():
                                return RunResult("finished", self.state)
                            await calls.run_tools(self, to_run)
                        case RecoverCalls(calls=half_done):
                            await calls.recover_calls(self, half_done)
                except (StoreError, asyncio.CancelledError):
                    raise
                except Exception as error:  # a bug in the runner or a plugin: capped (SPEC §6)
                    log.exception("task %s: internal error", self.task_id)
                    await self.settle([], on_internal_error(self.state, _describe(error)))
            if self.state.finished:
                return RunResult("finished", self.state)

    async def _model_step(self, action: CallModel | FindWhyCut) -> None:
        if isinstance(action, FindWhyCut):
            await model_cuts.record_why_cut(self, action.seq)
        else:
            # A late result for a call settled "outcome unknown" is told before the call.
            await grace.record_corrections(self)
            # Its jobs live only as long as this claim: a budget wait keeps it rather
            # than handing the task back.
            await model_call.call_model(self, keep_claim=self._has_jobs())

    # --- writing ----------------------------------------------------------------------

    async def append(
        self,
        new_events: Sequence[ev.Event],
        *,
        take: Sequence[int] = (),
        deliveries: Sequence[Delivery] = (),
        new_tasks: Sequence[NewTask] = (),
        next_state: NextState = Continue(),
        budget: ModelBudget | None = None,
    ) -> None:
        if isinstance(next_state, Finish):
            # A task never ends with a job unaccounted for: the worker stops it with the
            # claim once this lands (SPEC §3), so the log says so here.
            self.pending += [ev.JobStopped(job_id) for job_id in self.state.jobs]
        new_events = [*self.pending, *new_events]
        self.pending = []
        if self.hooks.on_event and isinstance(next_state, Wait | WaitHolding):
            if new_events:
                # A wait hands the task back only once every on_event ran and its records
                # landed: the events first, under the claim, then the wait.
                await self.append(new_events, take=take, deliveries=deliveries, new_tasks=new_tasks)
                await self.append([], next_state=next_state)
                return
            await failpoints.hit("hooks.before_wait")
        records, enqueued = await self.hooks.before_append(self.task_id, self.state, new_events)
        new_events += records
        deliveries = [*deliveries, *enqueued]
        encoded = [NewEvent(*ev.encode(event)) for event in new_events]
        finished = next((e for e in new_events if isinstance(e, ev.TaskFinished)), None)
        if finished is not None:
            report = finished.answer if finished.status == "done" else finished.error
            deliveries = [
                *deliveries,
                *children.finish_deliveries(self, finished.status, report),
            ]
            await children.before_finish(self)
        await failpoints.hit("append.before_commit")
        last_seq = await model_budget.writer(self.store, budget)(
            self.claim,
            self.state.last_seq,
            encoded,
            take=take,
            deliveries=deliveries,
            new_tasks=new_tasks,
            next_state=next_state,
        )
        await failpoints.hit("append.after_commit")
        if finished is not None and self.state.parent:
            await failpoints.hit("subtask.after_finish")
        first = self.state.last_seq + 1
        logged = [LoggedEvent(first + i, event) for i, event in enumerate(new_events)]
        self.state = fold(logged, self.state)
        assert self.state.last_seq == last_seq, (self.state.last_seq, last_seq)
        self.trace.appended(self.state)
        if self.state.last_seq - self.snapshot_seq >= self.runner.snapshot_every:
            await save_snapshot(self.store, self.task_id, self.version, self.state)
            self.snapshot_seq = self.state.last_seq
        if self.hooks.on_event:
            await failpoints.hit("hooks.before_on_event")
            written = await self.hooks.on_events(self.task_id, self.state, logged)
            await self._append_hook_writes(*written)

    async def _redeliver(self) -> None:
        """Events after a plugin's progress mark, delivered again (at least once)."""
        try:
            written = await self.hooks.redeliver(
                self.task_id, self.state, lambda mark: self.store.read_log(self.task_id, mark)
            )
        except HookFailed as error:
            log.error("task %s: %s", self.task_id, error)
            await self.settle([], on_internal_error(self.state, _describe(error)))
            return
        await self._append_hook_writes(*written)

    async def _append_hook_writes(self, records: list[ev.Event], sent: list[Delivery]) -> None:
        if not (records or sent):
            return
        if self.state.finished:
            # Nothing lands after a finish: a final event's writes belong in before_append.
            log.warning("task %s: on_event wrote after the task finished; dropped", self.task_id)
            return
        await self.append(records, deliveries=sent)

    async def settle(self, prefix: list[ev.Event], action: EndTurn | FinishTask) -> None:
        """Append the end of a turn and, when that ends a one-shot task, its finish too."""
        if isinstance(action, EndTurn):
            turn_ended = ev.TurnEnded(action.outcome, action.answer, action.error)  # type: ignore[arg-type]
            await self.append_settling([*prefix, turn_ended])
            return
        await self.append([*prefix, _finished(action)], next_state=_finish_state(action))

    async def append_settling(self, new_events: Sequence[ev.Event]) -> None:
        """Append `new_events` and, when they end the task (a one-shot task's last turn, a
        job's result), its TaskFinished in the same append: one round trip, not two."""
        first = self.state.last_seq + 1
        after = fold([LoggedEvent(first + i, e) for i, e in enumerate(new_events)], self.state)
        following = next_action(after)
        if isinstance(following, FinishTask):
            finished = [*new_events, _finished(following)]
            await self.append(finished, next_state=_finish_state(following))
        else:
            await self.append(new_events)

    # --- steps ------------------------------------------------------------------------

    async def _inbox(self) -> list[InboxEntry]:
        return [
            entry
            for entry in await self.store.read_inbox(self.task_id)
            if entry.id not in self.state.taken_inbox
        ]

    def _cancel_check_due(self) -> bool:
        """Before model calls and tool runs the inbox is read for a cancel at most every
        CANCEL_CHECK_SECONDS: one read fewer per step, and a cancel still lands in seconds
        (a cancel already in the inbox at the claim's load is seen at the first step)."""
        return time.monotonic() - self.cancel_checked_at >= CANCEL_CHECK_SECONDS

    def _has_jobs(self) -> bool:
        return bool(taking.jobs_running_here(self))

    async def _cancelled_before_step(self) -> bool:
        """Finished as cancelled if a cancel was asked (looked for when one is due)."""
        return self._cancel_check_due() and await self._cancel_if_asked(await self._inbox())

    async def _cancel_if_asked(self, inbox: list[InboxEntry]) -> bool:
        """`noeta cancel` delivered a request: finish the task as cancelled, taking it."""
        self.cancel_checked_at = time.monotonic()
        for entry in inbox:
            if taking.kind_of(entry.payload) == "cancel":
                finished = ev.TaskFinished("cancelled", error="cancelled on request")
                await self.append(
                    [finished], take=[entry.id], next_state=Finish(TaskStatus.CANCELLED)
                )
                return True
        return False

    async def _wake_if_due(self) -> bool:
        """Open a turn for the first pending wake-up if its time has come (store clock)."""
        due = wakeups.next_due(self.state)
        if due is None or due > await self.store.clock():
            return False
        await self.append([ev.WokenUp(self.state.wakeups[0][0])])
        return True

    async def _check_pins(self, available: tuple[Pin, ...]) -> RunResult | None:
        match check_pins(self.state, available):
            case PinPlugins(pins=pins):
                self.pending.append(ev.PluginsPinned(pins))  # lands with the first append
            case LeavePluginMissing(missing=missing):
                names = ", ".join(f"{pin.name} ({pin.source} {pin.version})" for pin in missing)
                if await self._give_up_loading(f"plugin_missing: this worker lacks {names}"):
                    return RunResult("finished", self.state)
                return RunResult("plugin_missing", self.state)
        return None

    async def _give_up_loading(self, error: str) -> bool:
        """Count a claim that could not run the task; after LOAD_ATTEMPTS, fail it.

        It writes nothing before that: a worker that can run the task may claim it.
        """
        # The fold may have stopped early: the log's real end is in the task row.
        record = await self.store.get_task(self.task_id)
        last_seq = record.last_seq if record else self.state.last_seq
        attempts = self.runner.load_attempts.failed(self.task_id, last_seq)
        log.warning(
            "task %s: cannot run it (%s), claim %d of %d",
            self.task_id,
            error,
            attempts,
            LOAD_ATTEMPTS,
        )
        if attempts < LOAD_ATTEMPTS:
            return False
        finish = ev.TaskFinished("failed", error=error)
        encoded = [NewEvent(*ev.encode(finish))]
        # What the fold got to (the parent link is the log's second event) is told too.
        tell = children.finish_deliveries(self, "failed", error)
        await children.before_finish(self)
        await self.store.append(
            self.claim, last_seq, encoded, deliveries=tell, next_state=Finish(TaskStatus.FAILED)
        )
        self.runner.load_attempts.forget(self.task_id)
        return True


def _finished(finish: FinishTask) -> ev.TaskFinished:
    return ev.TaskFinished(finish.status, finish.answer, finish.error)  # type: ignore[arg-type]


def _finish_state(finish: FinishTask) -> NextState:
    return Finish(TaskStatus(finish.status))


def _describe(error: Exception) -> str:
    return f"{type(error).__name__}: {error}"[:2000]
