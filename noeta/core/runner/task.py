"""Running one claimed task: fold the log, do what `next_action` says, append, repeat.

Every step is durable before its effect: `ModelCalled` before the request, `ToolStarted`
before the tool. The loop ends when the task finishes, hands itself back (waits), or
must be left alone (a newer version's log, an unreadable one). Store errors (`Conflict`,
`StoreUnavailable`, `CommitUnknown`) end it at once: the claim is lost.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol

from noeta.core import events as ev
from noeta.core import failpoints, wakeups
from noeta.core.errors import NoetaError, StoreError
from noeta.core.fold import LoggedEvent, TaskState, fold
from noeta.core.gates import Gate
from noeta.core.model import Provider, ProviderError
from noeta.core.next_action import (
    AwaitAnswer,
    AwaitMessage,
    CallModel,
    EndTurn,
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
from noeta.core.request import build_request
from noeta.core.retry import ModelCallFailed, Sleep, send_with_retries
from noeta.core.runner import calls
from noeta.core.runner.log import load_for_run, save_snapshot, snapshot_version
from noeta.core.store import (
    Claim,
    Continue,
    Finish,
    InboxEntry,
    NewEvent,
    NextState,
    Store,
    TaskStatus,
    Wait,
    WaitHolding,
)
from noeta.core.task import LOAD_ATTEMPTS, LoadAttempts
from noeta.core.task_id import workspace_folder
from noeta.core.tool import Jobs, Tool, spec_of
from noeta.observability import tracing

log = logging.getLogger(__name__)


CANCEL_CHECK_SECONDS = 2.0


def answer_key(call_id: str) -> str:
    """The dedupe key of a person's answer to an asked call (`noeta answer`)."""
    return f"answer:{call_id}"


Outcome = Literal[
    "finished", "waiting", "holding", "left_for_newer", "unreadable", "plugin_missing"
]


class Providers(Protocol):
    def provider_for(self, spec: str) -> tuple[Provider, str]:
        """The provider and model name for a model spec; raises ConfigError if unusable."""
        ...


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

    def workspace_for(self, task_id: str) -> str:
        if not self.workspaces:
            return ""
        return os.path.join(self.workspaces, workspace_folder(task_id))

    async def run(self, claim: Claim) -> RunResult:
        version = snapshot_version(self.agent)
        state, inbox = await load_for_run(self.store, claim.task_id, version)
        run = _Run(self, claim, state, version, tracing.begin_attempt(claim, state))
        if any(_kind(entry.payload) == "cancel" for entry in inbox):
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
    def workspace(self) -> str:
        return self.runner.workspace_for(self.task_id)

    async def clock(self) -> datetime:
        return await self.store.clock()

    async def loop(self) -> RunResult:
        if self.runner.pins is not None:
            stop = await self._check_pins(self.runner.pins)
            if stop is not None:
                return stop
        while True:
            action = next_action(self.state)
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
                        if await self._give_up_on_unreadable(reason):
                            return RunResult("finished", self.state)
                        return RunResult("unreadable", self.state)
                    case AwaitAnswer(call_id=call_id):
                        inbox = await self._inbox()
                        if await self._cancel_if_asked(inbox):
                            return RunResult("finished", self.state)
                        if not await self._take_answer(call_id, inbox):
                            prefix = answer_key(call_id)
                            await self.append([], next_state=Wait(wake_on_prefix=prefix))
                            return RunResult("waiting", self.state)
                    case AwaitMessage():
                        # One read of the inbox serves every check of this pass.
                        inbox = await self._inbox()
                        if await self._cancel_if_asked(inbox):
                            return RunResult("finished", self.state)
                        if (
                            await self._take_job_result(inbox)
                            or await self._record_a_lost_job(inbox)
                            or await self._take_message(inbox)
                            or await self._wake_if_due()
                        ):
                            continue
                        if self._jobs_running_here():
                            # Keep the claim (and its renewals): the job's result comes here.
                            await self.append([], next_state=WaitHolding())
                            return RunResult("holding", self.state)
                        # Claimable again at the next wake-up's due time, or by a delivery.
                        await self.append([], next_state=Wait(until=wakeups.next_due(self.state)))
                        return RunResult("waiting", self.state)
                    case EndTurn() | FinishTask():
                        await self.settle([], action)
                    case CallModel():
                        if self._cancel_check_due() and await self._cancel_if_asked(
                            await self._inbox()
                        ):
                            return RunResult("finished", self.state)
                        await self._call_model()
                    case RunTools(calls=to_run):
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

    # --- writing ----------------------------------------------------------------------

    async def append(
        self,
        new_events: Sequence[ev.Event],
        *,
        take: Sequence[int] = (),
        next_state: NextState = Continue(),
    ) -> None:
        if isinstance(next_state, Finish):
            # A task never ends with a job unaccounted for: the worker stops it with the
            # claim once this lands (SPEC §3), so the log says so here.
            self.pending += [ev.JobStopped(job_id) for job_id in self.state.jobs]
        new_events = [*self.pending, *new_events]
        self.pending = []
        encoded = [NewEvent(*ev.encode(event)) for event in new_events]
        await failpoints.hit("append.before_commit")
        last_seq = await self.store.append(
            self.claim, self.state.last_seq, encoded, take=take, next_state=next_state
        )
        await failpoints.hit("append.after_commit")
        first = self.state.last_seq + 1
        logged = [LoggedEvent(first + i, event) for i, event in enumerate(new_events)]
        self.state = fold(logged, self.state)
        assert self.state.last_seq == last_seq, (self.state.last_seq, last_seq)
        self.trace.appended(self.state)
        if self.state.last_seq - self.snapshot_seq >= self.runner.snapshot_every:
            await save_snapshot(self.store, self.task_id, self.version, self.state)
            self.snapshot_seq = self.state.last_seq

    async def settle(self, prefix: list[ev.Event], action: EndTurn | FinishTask) -> None:
        """Append the end of a turn and, when that ends a one-shot task, its finish too."""
        pending = list(prefix)
        finish: FinishTask | None = action if isinstance(action, FinishTask) else None
        if isinstance(action, EndTurn):
            pending.append(ev.TurnEnded(action.outcome, action.answer, action.error))  # type: ignore[arg-type]
            first = self.state.last_seq + 1
            after = fold([LoggedEvent(first + i, e) for i, e in enumerate(pending)], self.state)
            following = next_action(after)
            finish = following if isinstance(following, FinishTask) else None
        next_state: NextState = Continue()
        if finish is not None:
            pending.append(ev.TaskFinished(finish.status, finish.answer, finish.error))  # type: ignore[arg-type]
            next_state = Finish(TaskStatus(finish.status))
        await self.append(pending, next_state=next_state)

    # --- steps ------------------------------------------------------------------------

    async def _inbox(self) -> list[InboxEntry]:
        return [
            entry
            for entry in await self.store.read_inbox(self.task_id)
            if entry.id not in self.state.taken_inbox
        ]

    async def _take_answer(self, call_id: str, inbox: list[InboxEntry]) -> bool:
        for entry in inbox:
            answer = entry.payload
            if _kind(answer) == "answer" and isinstance(answer, dict):
                if answer.get("call_id") != call_id:
                    continue
                note = str(answer.get("note") or "")
                allowed = answer.get("decision") == "allow"
                answered = ev.ToolAnswered(call_id, "allow" if allowed else "deny", note, entry.id)
                await self.append([answered], take=[entry.id])
                return True
        return False

    def _cancel_check_due(self) -> bool:
        """Before model calls the inbox is read for a cancel at most every
        CANCEL_CHECK_SECONDS: one read fewer per step, and a cancel still lands in seconds."""
        return time.monotonic() - self.cancel_checked_at >= CANCEL_CHECK_SECONDS

    async def _cancel_if_asked(self, inbox: list[InboxEntry]) -> bool:
        """`noeta cancel` delivered a request: finish the task as cancelled, taking it."""
        self.cancel_checked_at = time.monotonic()
        for entry in inbox:
            if _kind(entry.payload) == "cancel":
                finished = ev.TaskFinished("cancelled", error="cancelled on request")
                await self.append(
                    [finished], take=[entry.id], next_state=Finish(TaskStatus.CANCELLED)
                )
                return True
        return False

    def _jobs_running_here(self) -> set[str]:
        jobs = self.runner.jobs
        return jobs.running(self.claim) & set(self.state.jobs) if jobs else set()

    async def _take_job_result(self, inbox: list[InboxEntry]) -> bool:
        results = _job_results(inbox)
        for job_id in self.state.jobs:
            entry = results.get(job_id)
            if entry is not None and isinstance(entry.payload, dict):
                code = entry.payload.get("exit_code")
                finished = ev.JobFinished(
                    job_id,
                    code if isinstance(code, int) else None,
                    str(entry.payload.get("output", "")),
                    entry.id,
                )
                await self.append([finished], take=[entry.id])
                return True
        return False

    async def _record_a_lost_job(self, inbox: list[InboxEntry]) -> bool:
        """A job in the log that no result came for and this worker is not running."""
        running, results = self._jobs_running_here(), _job_results(inbox)
        for job_id in self.state.jobs:
            if job_id not in running and job_id not in results:
                log.warning("task %s: background job %s was lost", self.task_id, job_id)
                self.trace.job_lost(job_id)
                await self.append([ev.JobLost(job_id)])
                return True
        return False

    async def _take_message(self, inbox: list[InboxEntry]) -> bool:
        for entry in inbox:
            if _kind(entry.payload) != "message":
                continue  # answers, cancels and job results are taken above (or are late)
            text = entry.payload["text"] if isinstance(entry.payload, dict) else entry.payload
            await self.append([ev.MessageTaken(entry.id, str(text))], take=[entry.id])
            return True
        return False

    async def _wake_if_due(self) -> bool:
        """Open a turn for the first pending wake-up if its time has come (store clock)."""
        due = wakeups.next_due(self.state)
        if due is None or due > await self.store.clock():
            return False
        await self.append([ev.WokenUp(self.state.wakeups[0][0])])
        return True

    async def _call_model(self) -> None:
        config = self.state.config
        assert config is not None
        try:
            provider, model_name = self.runner.providers.provider_for(config.model)
        except NoetaError as error:
            await self.settle([], EndTurn("failed", error=f"llm_error: {error}"))
            return
        tool_specs = tuple(
            spec_of(self.runner.tools[name]) for name in config.tools if name in self.runner.tools
        )
        request = build_request(self.state, model_name, tool_specs)
        body = provider.encode_request(request)
        # The span ends once the call's outcome is in the log; cut short, the next claimer
        # emits it from the record written with ModelCalled (ADR-0024).
        with self.trace.chat(provider.name, model_name, self.state) as step:
            step.input_messages(request.messages)
            await self.append([ev.ModelCalled(hashlib.sha256(body).hexdigest(), step.record)])
            await failpoints.hit("model.after_called")
            await self._send(provider, body, step)

    async def _send(self, provider: Provider, body: bytes, step: tracing.Step) -> None:
        try:
            reply = await send_with_retries(provider, body, self.runner.sleep)
        except ModelCallFailed as failed:
            step.failed(_error_type(failed.error), str(failed.error))
            closed = ev.ModelFailed(str(failed.error), failed.attempts)
            await self.settle([closed], EndTurn("failed", error=f"llm_error: {failed.error}"))
            return
        step.replied(reply)
        replied = ev.ModelReplied(
            reply.content,
            reply.stop_reason,
            reply.usage,
            reply.provider_stop_reason,
            reply.response_id,
        )
        # A reply that ends the turn ends it in the same append (and a one-shot task with
        # it): nothing happens outside between them, so nothing is lost by joining them.
        following = next_action(fold([LoggedEvent(self.state.last_seq + 1, replied)], self.state))
        if isinstance(following, EndTurn):
            await self.settle([replied], following)
        else:
            await self.append([replied])

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

    async def _give_up_on_unreadable(self, reason: str) -> bool:
        return await self._give_up_loading(f"unreadable_log: {reason}")

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
        await self.store.append(self.claim, last_seq, encoded, next_state=Finish(TaskStatus.FAILED))
        self.runner.load_attempts.forget(self.task_id)
        return True


def _kind(payload: object) -> str:
    """What an inbox entry is: "answer", "cancel", "job", or else a "message"."""
    kind = payload.get("kind") if isinstance(payload, dict) else None
    return kind if kind in ("answer", "cancel", "job") else "message"


def _job_results(inbox: list[InboxEntry]) -> dict[str, InboxEntry]:
    return {
        str(entry.payload.get("job_id")): entry
        for entry in inbox
        if _kind(entry.payload) == "job" and isinstance(entry.payload, dict)
    }


def _error_type(error: ProviderError) -> str:
    """A low-cardinality error type for spans and metrics: the HTTP status, or the kind."""
    return str(error.status) if error.status else type(error).__name__


def _describe(error: Exception) -> str:
    return f"{type(error).__name__}: {error}"[:2000]
