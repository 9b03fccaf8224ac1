"""The writing half of one claim's run: every append under the claim's fence, the end of a
turn or of the task riding on it, and what plugins' hooks write back (`task.py` is the loop).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from noeta.core import failpoints
from noeta.core.errors import ClaimUnknown, CommitUnknown
from noeta.core.ports.append_and_claim import ClaimAfter
from noeta.core.ports.model_limits import ModelBudget
from noeta.core.ports.store import (
    Claim,
    ClaimedTask,
    Continue,
    Delivery,
    Finish,
    LoadedTask,
    NewEvent,
    NewTask,
    NextState,
    NotStarted,
    Snapshot,
    Store,
    StoredEvent,
    TaskStatus,
    Wait,
    WaitHolding,
)
from noeta.core.rules import events as ev
from noeta.core.rules import snapshot
from noeta.core.rules.fold import LoggedEvent, fold
from noeta.core.rules.next_action import EndTurn, FinishTask, next_action, on_internal_error
from noeta.core.rules.task_state import TaskState
from noeta.core.runner import model_budget
from noeta.core.runner.job_finish import job_end
from noeta.core.runner.plugin_hooks import HookFailed, Hooks
from noeta.core.task import LOAD_ATTEMPTS, LoadAttempts
from noeta.observability import tracing

log = logging.getLogger(__name__)

# Told that a run is sending its task's finish, its last write (the claim, the state before).
Finishing = Callable[[Claim, TaskState], None]


class RunWriter:
    """Appends for one claim; `state` always equals the fold of what landed. The loop
    (`task._Run`) says what a finish brings along (`_finishing`)."""

    def __init__(
        self,
        store: Store,
        claim: Claim,
        state: TaskState,
        version: str,
        hooks: Hooks,
        snapshot_every: int,
        trace: tracing.Attempt,
    ) -> None:
        self.store = store
        self.claim = claim
        self.state = state
        self.version = version
        self.hooks = hooks
        self.snapshot_every = snapshot_every
        self.snapshot_seq = state.last_seq
        self.trace = trace
        # Events that ride with the next append (pins: no round trip of their own).
        self.pending: list[ev.Event] = []
        self.waits = False  # the last append handed the task back to wait (claim released)
        self.created: list[str] = []  # the tasks the appends that landed created
        # Those of them created claimed and started for this worker (ADR-0117).
        self.started: list[ClaimedTask] = []
        # The last look ahead (`folded`): from which state, over which events, to what.
        self._ahead: tuple[TaskState, tuple[ev.Event, ...], TaskState] | None = None
        # Told as the task's finish goes to the store (TaskRunner.finishing).
        self.finishing: Finishing | None = None
        # The claim this worker makes of a task the finish hands back to, in the finish's
        # own commit (TaskRunner.claim_after, ADR-0121); None: it claims it after.
        self.claim_after: Callable[[str], ClaimAfter | None] | None = None

    @property
    def task_id(self) -> str:
        return self.claim.task_id

    async def _finishing(self, status: str, report: str) -> list[Delivery]:
        """What a finishing append carries besides its events (the handback, the
        children's cancels), once whatever must precede the finish is done."""
        raise NotImplementedError

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
            deliveries = [*deliveries, *await self._finishing(finished.status, report)]
        if finished is not None and self.finishing is not None:
            self.finishing(self.claim, self.state)
        await failpoints.hit("append.before_commit")
        write = model_budget.writer(self.store, budget)

        async def land(tasks: Sequence[NewTask]) -> int:
            return await write(
                self.claim,
                self.state.last_seq,
                encoded,
                take=take,
                deliveries=deliveries,
                new_tasks=tasks,
                next_state=next_state,
            )

        then = self._then(deliveries) if finished and not (take or new_tasks or budget) else None
        try:
            if then is not None:
                last_seq = await self._land_claiming(encoded, deliveries, next_state, then)
            else:
                last_seq = await land(new_tasks)
        except NotStarted:  # a queue with settings (ADR-0117): created to be claimed
            new_tasks = [replace(task, started=None) for task in new_tasks]
            last_seq = await land(new_tasks)
        await failpoints.hit("append.after_commit")
        self.started += [started_task(self.claim, task) for task in new_tasks if task.started]
        self.waits = isinstance(next_state, Wait)
        self.created += [task.id for task in new_tasks]
        if finished is not None and self.state.parent:
            await failpoints.hit("subtask.after_finish")
        first = self.state.last_seq + 1
        self.state = self.folded(new_events)
        self._ahead = None
        assert self.state.last_seq == last_seq, (self.state.last_seq, last_seq)
        self.trace.appended(self.state)
        if self.state.last_seq - self.snapshot_seq >= self.snapshot_every:
            await save_snapshot(self.store, self.task_id, self.version, self.state)
            self.snapshot_seq = self.state.last_seq
        if self.hooks.on_event:
            await failpoints.hit("hooks.before_on_event")
            logged = [LoggedEvent(first + i, event) for i, event in enumerate(new_events)]
            written = await self.hooks.on_events(self.task_id, self.state, logged)
            await self._append_hook_writes(*written)

    def _then(self, deliveries: Sequence[Delivery]) -> ClaimAfter | None:
        """The claim to make with a finish whose handback the worker continues (a canvas
        member's, ADR-0121): the worker's, if it gives one and the store can."""
        continued = next((d.task_id for d in deliveries if d.continued), None)
        if continued is None or self.claim_after is None:
            return None
        if self.store.capabilities.append_and_claim is None:
            return None
        return self.claim_after(continued)

    async def _land_claiming(
        self,
        encoded: Sequence[NewEvent],
        deliveries: Sequence[Delivery],
        next_state: NextState,
        then: ClaimAfter,
    ) -> int:
        """The finish, and `then`'s claim in its commit: the task claimed is the worker's
        to run next, as one created started is (`started`)."""
        joint = self.store.capabilities.append_and_claim
        assert joint is not None  # `_then` said so
        try:
            last_seq, claimed = await joint.append_and_claim(
                self.claim, self.state.last_seq, encoded,
                deliveries=deliveries, next_state=next_state, then=then,
            )  # fmt: skip
            await failpoints.hit("append_and_claim.after_commit")
        except CommitUnknown as error:  # the claim may be the worker's: it adopts it
            raise ClaimUnknown(str(error), then.task_id) from error
        self.started += [claimed] if claimed is not None else []
        return last_seq

    def folded(self, new_events: Sequence[ev.Event]) -> TaskState:
        """The state once `new_events` land after the current one. The last answer is
        kept: a step decided on the fold of a reply (does it end the turn, does that end
        the task) folds only the events it adds, and the append that lands them none."""
        ahead = self._ahead
        start, done = self.state, 0
        if ahead is not None and ahead[0] is self.state and _begins_with(new_events, ahead[1]):
            start, done = ahead[2], len(ahead[1])
        if done < len(new_events):
            first = self.state.last_seq + 1
            rest = [LoggedEvent(first + i, new_events[i]) for i in range(done, len(new_events))]
            start = fold(rest, start)
        self._ahead = (self.state, tuple(new_events), start)
        return start

    async def _redeliver(self) -> None:
        """Events after a plugin's progress mark, delivered again (at least once)."""
        try:
            written = await self.hooks.redeliver(
                self.task_id, self.state, lambda mark: self.store.read_log(self.task_id, mark)
            )
        except HookFailed as error:
            log.error("task %s: %s", self.task_id, error)
            await self.settle([], on_internal_error(self.state, describe(error)))
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
        if (ended := job_end(self.state, new_events)) is not None:  # told unfolded: ADR-0142
            await self.append([*new_events, ended], next_state=Finish(TaskStatus(ended.status)))
            return
        following = next_action(self.folded(new_events))
        if isinstance(following, FinishTask):
            finished = [*new_events, _finished(following)]
            await self.append(finished, next_state=_finish_state(following))
        else:
            await self.append(new_events)

    async def give_up_loading(self, error: str, load_attempts: LoadAttempts) -> bool:
        """Count a claim that could not run the task; after LOAD_ATTEMPTS, fail it.

        It writes nothing before that: a worker that can run the task may claim it.
        """
        # The fold may have stopped early: the log's real end is in the task row.
        record = await self.store.get_task(self.task_id)
        last_seq = record.last_seq if record else self.state.last_seq
        attempts = load_attempts.failed(self.task_id, last_seq)
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
        tell = await self._finishing("failed", error)
        await self.store.append(
            self.claim, last_seq, encoded, deliveries=tell, next_state=Finish(TaskStatus.FAILED)
        )
        load_attempts.forget(self.task_id)
        return True


async def save_snapshot(store: Store, task_id: str, version: str, state: TaskState) -> None:
    await store.put_snapshot(Snapshot(task_id, version, state.last_seq, snapshot.dump(state)))


def describe(error: Exception) -> str:
    """An internal error as the log records it (bounded)."""
    return f"{type(error).__name__}: {error}"[:2000]


def _finished(finish: FinishTask) -> ev.TaskFinished:
    return ev.TaskFinished(finish.status, finish.answer, finish.error)  # type: ignore[arg-type]


def _finish_state(finish: FinishTask) -> NextState:
    return Finish(TaskStatus(finish.status))


def _begins_with(events: Sequence[ev.Event], prefix: tuple[ev.Event, ...]) -> bool:
    """Whether `events` begin with these very event objects (events are values, but two
    equal ones in a row are two events: identity, not equality)."""
    if len(events) < len(prefix):
        return False
    return all(a is b for a, b in zip(events[: len(prefix)], prefix, strict=True))


def started_task(claim: Claim, task: NewTask) -> ClaimedTask:
    """A task an append created started for `claim`'s worker (ADR-0117), as a claim that
    read it would give it: epoch 1, and its log as the append wrote it. The lease's end is
    told as `claim`'s, which it outlasts (the store set it later, as long)."""
    assert task.started is not None
    now = datetime.now(UTC)
    written = [*task.events, *task.started.events]
    events = [
        StoredEvent(task.id, seq, event.type, event.data, now)
        for seq, event in enumerate(written, start=1)
    ]
    started = Claim(task.id, task.started.worker, 1, claim.lease_until)
    return ClaimedTask(started, LoadedTask(None, events, [], started_by_claim=True))
