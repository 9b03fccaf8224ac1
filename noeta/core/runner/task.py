"""Running one claimed task: fold the log, do what `next_action` says, append, repeat.

Every step is durable before its effect (`ModelCalled` before the request, `ToolStarted`
before the tool). It ends when the task finishes, waits, or is left alone (a newer log, an
unreadable one); a store error (`Conflict`, `CommitUnknown`...) ends it: the claim is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from noeta.core.errors import NoetaError, StoreError
from noeta.core.ports.append_and_claim import ClaimAfter
from noeta.core.ports.pin import Pin
from noeta.core.ports.store import (
    DEFAULT_QUEUE,
    Claim,
    ClaimedTask,
    Delivery,
    Finish,
    InboxEntry,
    JobStarts,
    LoadedTask,
    Store,
    TaskStatus,
    Wait,
    WaitHolding,
)
from noeta.core.ports.store_values import answer_key
from noeta.core.ports.tool import Jobs, Tool
from noeta.core.ports.workspace_copy import WorkspaceCopier
from noeta.core.retry import Sleep
from noeta.core.rules import canvas, wakeups
from noeta.core.rules import events as ev
from noeta.core.rules.gates import Gate
from noeta.core.rules.next_action import (
    AwaitAnswer,
    AwaitMessage,
    AwaitRetry,
    AwaitSubtasks,
    CallModel,
    EndTurn,
    FindWhyCut,
    FinishTask,
    LeaveForNewerVersion,
    LeaveUnreadable,
    RecoverCalls,
    RunTools,
    Stop,
    next_action,
    on_internal_error,
)
from noeta.core.rules.task_id import workspace_folder
from noeta.core.rules.task_state import TaskState
from noeta.core.runner import calls, children, grace, members, model_call, model_cuts, pins, taking
from noeta.core.runner.cancelling import CANCEL_CHECK_SECONDS
from noeta.core.runner.forked_workspace import copy_if_asked
from noeta.core.runner.kept_states import KeptStates
from noeta.core.runner.model_call import Providers
from noeta.core.runner.plugin_hooks import HookPlugins, Hooks
from noeta.core.runner.reply_streams import StreamWriter
from noeta.core.runner.writing import Finishing, RunWriter, describe
from noeta.core.task import LoadAttempts
from noeta.core.task_loading import load_for_run, snapshot_version
from noeta.observability import tracing

log = logging.getLogger(__name__)


Outcome = Literal[
    "finished",
    "waiting",
    "holding",
    "left_for_newer",
    "unreadable",
    "plugin_missing",
    "handed_back",
]


@dataclass(frozen=True, slots=True)
class RunResult:
    outcome: Outcome
    state: TaskState
    # The tasks the run's appends created (a canvas's members), in creation order.
    created: tuple[str, ...] = ()
    # The one of them created claimed and started for this worker, to run next in the
    # slot this run held (ADR-0117).
    started: ClaimedTask | None = None


@dataclass
class TaskRunner:
    store: Store
    providers: Providers
    tools: Mapping[str, Tool] = field(default_factory=dict)
    sleep: Sleep = asyncio.sleep
    snapshot_every: int = 200
    load_attempts: LoadAttempts = field(default_factory=LoadAttempts)
    agent: str = ""
    # Each task's files: <workspaces>/<task id> (`workspace_folder`); "" gives no file access.
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
    # Makes a fork's workspace a copy of its source's (ADR-0096); None: such forks fail.
    workspace_copier: WorkspaceCopier | None = None
    # The worker's word that it claims `task_id` next, in the slot the run ends in (ADR-0109):
    # `continues(task_id, queue)`, the queue None where the run does not know it. What a
    # run makes claimable for it calls no idle worker (ADR-0117). None: nobody continues
    # (noeta run, tests).
    continues: Callable[[str, str | None], bool] | None = None
    # The claim the worker makes, in a canvas member's finishing commit, of the canvas it
    # hands back to (ADR-0121); None where it will not claim it. None: claimed after.
    claim_after: Callable[[str], ClaimAfter | None] | None = None
    # The lease the worker's claims take, for a task created started for it (ADR-0117).
    lease_seconds: float | None = None
    # Set by a worker's warm shutdown: a run finishes the step it is in, starts no other
    # model call or tool, and hands its task back ("handed_back") for the worker to release.
    draining: bool = False
    # Where replies stream for their readers (ADR-0105); by default the store's, if it
    # keeps streams.
    streams: StreamWriter | None = None
    # Told as a run sends its task's finish: a worker frees the run's slot then, so that
    # its next claim can share the finish's round trip (ADR-0116).
    finishing: Finishing | None = None

    # The states its canvases' last runs here left (ADR-0120): a step's claim folds
    # only what came after.
    kept: KeptStates = field(default_factory=KeptStates)

    def __post_init__(self) -> None:
        self.hook_plugins = HookPlugins.of(self.plugins)
        port = self.store.capabilities.reply_streams
        if self.streams is None and port is not None:
            self.streams = StreamWriter(port)

    def workspace_for(self, task_id: str) -> str:
        return os.path.join(self.workspaces, workspace_folder(task_id)) if self.workspaces else ""

    @property
    def job_starts(self) -> JobStarts | None:
        """What this runner's claims may start for it (ADR-0101; `pins.claim_starts`)."""
        return pins.claim_starts(self.pins, self.gates, self.hook_plugins, self.draining)

    @property
    def snapshot_version(self) -> str:
        """The version of the snapshots this runner reads and writes (and its claims ask for)."""
        return snapshot_version(self.agent)

    async def run(self, claim: Claim, loaded: LoadedTask | None = None) -> RunResult:
        """Run the claimed task; `loaded`: the task as the claim read it (of this runner's
        snapshot version), else the run reads it first."""
        version = self.snapshot_version
        if loaded is None:
            loaded = await self.store.load(claim.task_id, version)
        kept = self.kept.take(claim)
        known = kept.state if kept is not None else None
        state, inbox = await load_for_run(self.store, claim.task_id, version, loaded, known)
        run = _Run(self, claim, state, version, tracing.begin_attempt(claim, state))
        # The snapshot's cadence counts from the snapshot read, not from this claim: a
        # task claimed for a step or two at a time (a canvas, ADR-0117) would otherwise
        # never reach `snapshot_every` within one run and be read whole at every claim.
        # A claim that read only after the kept state (ADR-0122) read no snapshot: the
        # kept state's run says which was last.
        if loaded.after_seq is not None:
            run.snapshot_seq = kept.snapshot_seq if kept is not None else 0
        else:
            run.snapshot_seq = loaded.snapshot.seq if loaded.snapshot is not None else 0
        run.started_by_claim = loaded.started_by_claim
        run.loaded_inbox = inbox
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
        if result.outcome == "waiting":  # every append landed: the log holds this state
            self.kept.keep(claim, result.state, run.snapshot_seq, kept)
        started = run.started[0] if run.started else None
        return RunResult(result.outcome, result.state, tuple(run.created), started)


class _Run(RunWriter):
    """One claim's run of a task (the RunContext of calls.py); the appends are RunWriter's."""

    def __init__(
        self,
        runner: TaskRunner,
        claim: Claim,
        state: TaskState,
        version: str,
        trace: tracing.Attempt = tracing.NO_ATTEMPT,
    ) -> None:
        super().__init__(
            runner.store,
            claim,
            state,
            version,
            Hooks(runner.hook_plugins),
            runner.snapshot_every,
            trace,
        )
        self.runner = runner
        self.finishing = runner.finishing
        self.claim_after = runner.claim_after
        self.cancel_checked_at = -math.inf
        self._queue = ""
        # The claim started the job's call (ADR-0101): its first step runs it, never as a
        # half-done call to recover, and a draining worker does not hand it back.
        self.started_by_claim = False
        # The untaken inbox as the run's load read it, for its first step, and the log's
        # end then (a step that appended reads the inbox again).
        self.loaded_inbox: list[InboxEntry] | None = None
        self.loaded_seq = state.last_seq

    # --- the RunContext the steps in calls.py see ---------------------------------------

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
    def streams(self) -> StreamWriter | None:
        return self.runner.streams

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

    def starts(self) -> tuple[JobStarts, float] | None:
        starts, lease = self.runner.job_starts, self.runner.lease_seconds
        return None if starts is None or lease is None else (starts, lease)

    def continues(self, task_id: str, queue: str | None = None) -> bool:
        promise = self.runner.continues
        return promise is not None and not self.runner.draining and promise(task_id, queue)

    async def queue(self) -> str:
        if not self._queue:
            record = await self.store.get_task(self.task_id)
            self._queue = record.queue if record else DEFAULT_QUEUE
        return self._queue

    def _burst(self, action: object) -> contextlib.AbstractAsyncContextManager[None]:
        """A step that only reads and writes the store runs on one store connection; one
        that calls a model or runs tools takes one per statement (none held meanwhile), and
        so does every step of a run whose plugins have hooks: a hook awaits what it likes
        inside the step's writes, and a worker's few connections are shared (ADR-0139)."""
        holding = self.store.capabilities.holding  # PostgreSQL's; sqlite has none
        if (
            holding is None
            or self.hooks.before
            or self.hooks.after
            or isinstance(action, CallModel | RunTools | RecoverCalls | AwaitRetry)
        ):
            return contextlib.nullcontext()
        burst: contextlib.AbstractAsyncContextManager[None] = holding()
        return burst

    async def _before_the_steps(self) -> RunResult | None:
        """Pins checked, workspace copied, hooks caught up: never for a log with an event
        this code cannot read."""
        if self.state.newer_event:
            return None  # next_action leaves it; nothing writes to it first (ADR-0097)
        left = await pins.check(self, self.runner.pins, self.runner.load_attempts)
        stop = RunResult(left, self.state) if left else await self._copy_workspace()
        if stop is None and self.hooks.on_event and not self.state.finished:
            await self._redeliver()
        return stop

    async def loop(self) -> RunResult:
        if (stop := await self._before_the_steps()) is not None:
            return stop
        while True:
            action = next_action(self.state)
            if self._handing_back_before(action):
                return RunResult("handed_back", self.state)
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
                            if await self.give_up_loading(
                                f"unreadable_log: {reason}", self.runner.load_attempts
                            ):
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
                        case AwaitSubtasks() | canvas.LaunchMembers() | canvas.AwaitMembers():
                            inbox = await self._inbox(fresh_from_the_load=True)
                            if await self._cancel_if_asked(inbox):
                                return RunResult("finished", self.state)
                            if not await members.advance(self, action, inbox):
                                return RunResult("waiting", self.state)
                        case EndTurn() | FinishTask():
                            await self.settle([], action)
                        case CallModel() | FindWhyCut():
                            if await self._cancelled_before_step():
                                return RunResult("finished", self.state)
                            await self._model_step(action)
                        case RunTools(calls=to_run) | AwaitRetry(calls=to_run):
                            # A cancel stops calls not yet started: a queued job's function
                            # never runs (Celery's revoke). One already started (RecoverCalls)
                            # is settled first, so nothing it made is left behind.
                            if await self._cancelled_before_step():
                                return RunResult("finished", self.state)
                            await calls.run_tools(self, to_run)
                        case RecoverCalls(calls=((call, _),)) if self.started_by_claim:
                            self.started_by_claim = False
                            await calls.run_started_by_claim(self, call)
                        case RecoverCalls(calls=half_done):
                            await calls.recover_calls(self, half_done)
                except (StoreError, asyncio.CancelledError):
                    raise
                except Exception as error:  # a bug in the runner or a plugin: capped (SPEC §6)
                    log.exception("task %s: internal error", self.task_id)
                    await self.settle([], on_internal_error(self.state, describe(error)))
            if self.state.finished or self.waits:  # waits: a job's next attempt, slot free
                return RunResult("finished" if self.state.finished else "waiting", self.state)

    def _handing_back_before(self, action: object) -> bool:
        """A draining worker's run starts no model call or tool: the step it was in has
        ended (its result recorded), and the task goes back to another worker."""
        return (
            self.runner.draining
            and not self.started_by_claim
            and isinstance(action, CallModel | FindWhyCut | RunTools | RecoverCalls | AwaitRetry)
        )

    async def _model_step(self, action: CallModel | FindWhyCut) -> None:
        if isinstance(action, FindWhyCut):
            await model_cuts.record_why_cut(self, action.seq)
        else:
            # A late result for a call settled "outcome unknown" is told before the call.
            await grace.record_corrections(self)
            # Its jobs live only as long as this claim: a budget wait keeps it rather
            # than handing the task back.
            await model_call.call_model(self, keep_claim=bool(taking.jobs_running_here(self)))

    # --- steps ------------------------------------------------------------------------

    async def _inbox(self, *, fresh_from_the_load: bool = False) -> list[InboxEntry]:
        """The untaken inbox; `fresh_from_the_load`: the one the run's load read, if
        nothing was appended since (a canvas continued at once saves the round trip; an
        entry delivered after it wakes the task again)."""
        loaded, self.loaded_inbox = self.loaded_inbox, None
        if fresh_from_the_load and loaded is not None and self.state.last_seq == self.loaded_seq:
            return loaded
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

    async def _finishing(self, status: str, report: str) -> list[Delivery]:
        deliveries = children.finish_deliveries(self, status, report)
        await children.before_finish(self)
        return deliveries

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

    async def _copy_workspace(self) -> RunResult | None:
        failed = await copy_if_asked(self, self.runner.workspace_copier, self.runner.workspace_for)
        return RunResult("finished", self.state) if failed else None
