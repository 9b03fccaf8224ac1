"""The claim loop: up to N tasks at once, leases renewed, lost claims dropped (SPEC §3).

| what happened                         | what the worker does                                  |
| renew returns nothing                 | cancel that task's run: its next write would fail     |
| renew keeps failing (store down)      | retry until its own lease deadline, then give it up   |
| Conflict on append                    | stop writing to that task                             |
| StoreUnavailable while working        | stop; once the store is back and the lease lapsed,    |
|                                       | the task is claimed again                             |
| any other StoreError while claiming   | back off (capped at a lease, jittered); never exit    |
| CommitUnknown                         | a lost claim; during a claim: adopt what the store    |
|                                       | records as ours that we are not running (renewed      |
|                                       | while they wait for a slot)                           |
| SIGTERM / SIGINT (`stop`)             | claim nothing more; each run ends the step it is in   |
|                                       | (a job's function, a tool call) within the grace and  |
|                                       | hands its task back; what is left at the grace's end  |
|                                       | or at `hand_back` (a second signal) is cut off and    |
|                                       | released at once, exit 0                              |

Every map here is keyed by the claim (task id, epoch): this worker may claim a task again
while what it held for the previous epoch is still being let go.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from datetime import datetime
from typing import Any

from noeta.core import failpoints
from noeta.core.errors import (
    ClaimUnknown,
    CommitUnknown,
    Conflict,
    StoreError,
    StoreUnavailable,
)
from noeta.core.ports.lone_run import RUNS_WRITING
from noeta.core.ports.store import (
    MAX_CLAIM_BATCH,
    Claim,
    ClaimedTask,
    ClaimKey,
    LoadedTask,
    Store,
)
from noeta.core.rules.task_state import TaskState
from noeta.core.runner.task import RunResult, TaskRunner
from noeta.health.liveness import Liveness
from noeta.observability import metrics, tracing
from noeta.worker.claim_failures import ClaimFailures
from noeta.worker.claim_form import ClaimForm
from noeta.worker.claim_lines import log_claim, log_when_durable
from noeta.worker.claims_ahead import ClaimsAhead
from noeta.worker.continuing import ContinuingClaims, follow_on
from noeta.worker.idle_registration import IdleRegistration
from noeta.worker.jobs import JobManager
from noeta.worker.presence import Presence, offers_of
from noeta.worker.renewal import Renewer
from noeta.worker.settings import WorkerSettings
from noeta.worker.shutdown import Housekeeping, drain
from noeta.worker.waiting_claims import CLAIM_LOOP
from noeta.worker.wake_signal import WakeSignal
from noeta.worker.warmup import warm_up

log = logging.getLogger("noeta.worker")

AFTER_COMMIT = "claim.after_commit"
# Failpoints between a claim's commit and its run's first write: armed, no claim is held.
AFTER_A_CLAIMS_COMMIT = (AFTER_COMMIT, "append.before_commit")


class Worker(ContinuingClaims):
    def __init__(
        self,
        store: Store,
        runner: TaskRunner,
        settings: WorkerSettings,
        liveness: Liveness | None = None,
    ) -> None:
        self.store = store
        self.runner = runner
        self.settings = settings
        # Each loop's last turn, for /livez (`--health`); kept whether or not it is served.
        self.liveness = liveness or Liveness()
        self.renewer = Renewer(store, settings.lease_seconds, self._lost, liveness=self.liveness)
        self.jobs = JobManager(store, self._resume_holding, runner.streams)
        runner.jobs = self.jobs
        runner.finishing = self._finishing
        # Runs whose slot was freed as they sent their finish (ADR-0116).
        self._freed: set[ClaimKey] = set()
        runner.continues = self._continues
        runner.claim_after = self._claim_after
        runner.lease_seconds = settings.lease_seconds
        self.running: dict[ClaimKey, tuple[Claim, asyncio.Task[RunResult | None]]] = {}
        # Claims waiting while their task holds them (a background job of theirs runs here).
        self.holding: dict[ClaimKey, Claim] = {}
        # Claims whose job result came while their run was still deciding to hold: the
        # run resumes at once instead of holding for a result already delivered.
        self._resume_on_hold: set[ClaimKey] = set()
        # Adopted claims waiting for a slot: renewed all the while, so none lapses unrun.
        self.adopted: dict[ClaimKey, Claim] = {}
        self.quiet_canvases: dict[str, None] = {}  # continuing.follow_on's
        self._slots = asyncio.Semaphore(settings.concurrency)
        # A claim that starts jobs takes at most half the slots: the other half's claim is
        # in flight while this one's runs do their Python (ADR-0124).
        self._job_claim_size = max(1, (settings.concurrency + 1) // 2)
        self._wake = WakeSignal()
        self._stopping = False
        self._began: datetime | None = None  # the store's clock as this run began
        # Claims this process ran whose run ended with the claim's fate unknown: adopted
        # again, their calls are not run as the claim's fresh starts (lost_claims.py).
        self._ran_unsettled: dict[ClaimKey, None] = {}
        self._handing_back = False
        # The claims whose step the stop cut off (it did not end within the grace): a sync
        # function among them may run on in its thread, which nothing can stop.
        self.cut_off: list[Claim] = []
        self._background: set[asyncio.Future[None]] = set()
        self._claim_failures = ClaimFailures(settings.poll_seconds, settings.lease_seconds)
        self._housekeeping = Housekeeping(store)  # hands tasks back; stops in an outage
        # The plugin names this worker has: it claims only tasks that need no other.
        self.offers = offers_of(runner.pins)
        self.presence = Presence(
            store.capabilities.workers,
            (settings.name, settings.queues, self.offers, settings.concurrency),
            settings.lease_seconds,
            settings.unrunnable_after,
            self._give_up,
        )
        idle_workers = store.capabilities.idle_workers
        self._claim_form = ClaimForm()
        self._ahead = ClaimsAhead(settings.concurrency)  # claimed while every slot is busy
        self._unlogged: list[Claim] = []  # a pickup started but not yet logged (ADR-0131)
        self.registration = (
            None
            if idle_workers is None
            else IdleRegistration(idle_workers, settings.queues, settings.lease_seconds, self.wake)
        )

    def wake(self) -> None:
        """Something may have become claimable: look now rather than at the next poll."""
        self._wake.set()

    async def run(self, stop: asyncio.Event, hand_back: asyncio.Event | None = None) -> None:
        """Claim and run tasks until `stop` is set; then let running steps finish within
        the grace (or until `hand_back` is set) and hand every running task back."""
        # The runs it starts see how many it has: a lone one writes at once (ADR-0135).
        writing = RUNS_WRITING.set(lambda: len(self.running) + len(self.holding))
        try:
            await self._claim_and_run(stop, hand_back)
        finally:
            RUNS_WRITING.reset(writing)

    async def _claim_and_run(self, stop: asyncio.Event, hand_back: asyncio.Event | None) -> None:
        await self.presence.register()  # a name another live worker holds is refused
        if self.runner.job_starts is not None:  # what its own lost claims started (ADR-0101)
            with contextlib.suppress(StoreError):
                self._began = await self.store.clock()
        await warm_up()  # before the first claim: nothing a claim starts waits on imports
        renewing = asyncio.create_task(self.renewer.run(), name="noeta-renewal")
        listening = asyncio.create_task(self._listen(), name="noeta-wakeups")
        measuring = asyncio.create_task(
            metrics.measure_queue_depth_on_a_timer(self.store, self.settings.queues),
            name="noeta-queue-depth",
        )
        watching = asyncio.create_task(self._watch_holding(), name="noeta-holding")
        present = asyncio.create_task(self.presence.keep(), name="noeta-presence")
        stopping = asyncio.create_task(stop.wait())
        try:
            while not stop.is_set():
                if self._slots.locked():  # every slot busy: wait for one, or for the stop
                    slot = await self._slot_when_busy(stop, stopping)
                    if slot is None:
                        continue  # the tasks claimed ahead waited too long: handed back
                    if not slot:
                        break
                else:  # a free slot: the idle worker woken by a call, or a run ended
                    await self._slots.acquire()
                if (ahead := self._ahead.next()) is not None:
                    self._start(ahead.claim, ahead.loaded, renew=False)  # renewed since
                    continue
                # A claim, and a registration waiting up to a poll: each bounded.
                self.liveness.turned(CLAIM_LOOP, self.settings.poll_seconds)
                await failpoints.hit("worker.claim_loop")
                if self.registration is not None and self.registration.skips_the_claim:
                    # What the claim would clear (no await since the check: a call sets
                    # claim_next first); the registration below looks instead (ADR-0087).
                    self._wake.clear()
                    self._slots.release()
                    started = 0
                else:
                    started = await self._claim_free_slots()
                if self.registration is not None:
                    await self._keep_registration(started)
                    if (
                        not started
                        and self.registration.needed
                        and not self._claim_failures.count
                        and await self.registration.register(self.settings.poll_seconds)
                    ):
                        continue  # a task became claimable before the registration
                if not started:
                    await self._idle(stopping)
        finally:
            self.liveness.forget(CLAIM_LOOP)  # stopped on purpose: not stuck
            stopping.cancel()
            await self._shut_down(hand_back)
            for background in (renewing, listening, measuring, watching, present):
                background.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await background
            if not self._housekeeping.unreachable:
                await self.presence.leave()

    async def _listen(self) -> None:
        """Wake the claim loop when a store says a task became claimable in our queues."""
        if self.registration is not None:
            await self.registration.listen()  # one worker woken per task (ADR-0087)
            return
        notifications = self.store.capabilities.wakeups
        if notifications is None:
            return  # sqlite: the poll alone
        listening = False
        async for queue in notifications():
            if queue == "*" and not listening:
                listening = True
                log.info("listening for wake-ups")
            if queue == "*" or queue in self.settings.queues:
                self.wake()

    async def _keep_registration(self, started: int) -> None:
        """A registered worker that the poll (not a call) has just filled leaves the
        registry: a call to it now would wait for a slot while another worker idles."""
        assert self.registration is not None
        if started and self._slots.locked() and self.registration.registered:
            await self.registration.leave()

    async def _free_slots(self, most: int) -> int:
        """Take up to `most` more of the slots free now (the claim's size, less the one
        held), without waiting: acquire() returns at once while the semaphore is not locked, and
        one that a resuming or adopted claim waits for is locked (it has waiters), so
        none is taken from them."""
        taken = 0
        while taken < most and not self._slots.locked():
            await self._slots.acquire()
            taken += 1
        return taken

    async def _claim_free_slots(self) -> int:
        """One claim statement fills the slots free now (ADR-0060); one that starts jobs,
        half the worker's at most (ADR-0124). The runs it starts send their first write
        before this loop's next statement (a pickup's, else it waits behind the
        registration's), unless it came back full with slots still free: then the next
        claim goes first."""
        starts_jobs = self._claim_form.starts(self.runner.job_starts) is not None
        size = self._job_claim_size if starts_jobs else MAX_CLAIM_BATCH
        slots = 1 + await self._free_slots(size - 1)
        if self.registration is not None:
            self.registration.claiming()
        started = await self._claim(slots)
        for _ in range(slots - started):
            self._slots.release()
        if self.registration is not None:
            self.registration.claimed(started, failed=self._claim_failures.count > 0)
        try:
            if started and (started < slots or self._slots.locked()):
                await asyncio.sleep(0)  # one turn of the loop: each new run to its first await
                if len(self.running) == started:
                    # An idle worker's pickup: its runs' first write waits out a turn of its
                    # own for company (ADR-0125); it goes before this loop's next statement.
                    await asyncio.sleep(0)
            # else a full claim with slots still free: the next claim goes first, and these
            # runs do their Python while it is in flight (ADR-0124)
        finally:
            self._log_claimed()  # after the runs' first writes went: off the pickup's path
        return started

    def _log_claimed(self) -> None:
        """An idle worker's pickup's log line, written once its run has sent its first
        write (or at once, where the next claim goes first): a line costs a pickup about a
        tenth of a millisecond of formatting, scrubbing and writing (ADR-0131)."""
        unlogged, self._unlogged = self._unlogged, []
        for claim in unlogged:
            log_claim(claim)

    async def _claim(self, slots: int) -> int:
        """Claim up to `slots` tasks, read with their claim, and start running them;
        return how many slots that used (0: there was nothing to claim)."""
        settings = self.settings
        # Cleared before the claim, not after: a wake-up that arrives while the claim is
        # in flight (for a task committed too late for it to see) must not be lost.
        self._wake.clear()
        starts = self._claim_form.starts(self.runner.job_starts)
        # An idle worker's claim of an agent task commits with its run's first write
        # (ADR-0136); one that starts jobs must be durable before their calls, and one
        # whose commit a fault test or drill acts after commits alone.
        hold = not self.running and starts is None and not failpoints.armed(*AFTER_A_CLAIMS_COMMIT)
        try:
            claimed = await self.store.claim_and_load(
                settings.name,
                settings.queues,
                settings.lease_seconds,
                limit=slots,
                snapshot_version=self.runner.snapshot_version,
                excluding=self._own_tasks(),
                offers=self.offers,
                job_starts=starts,  # fresh jobs started by the claim (ADR-0101)
                hold=hold,
            )
            self._claim_form.found(claimed, starts)
            if claimed:
                held = claimed[0].durable is not None
                await failpoints.hit("claim.held" if held else AFTER_COMMIT)
        except CommitUnknown:
            log.warning("claim: the commit's outcome is unknown; adopting what is ours")
            return 1 if await self._adopt() else 0
        except StoreError as error:  # unreachable, read-only, out of disk, a timeout, ...
            self._claim_failures.failed(error)
            wait = self._claim_failures.wait()
            log.warning("claim: %s; trying again in at most %.1f s", error, wait)
            return 0
        self._claim_failures.succeeded()
        self._ahead.claimed(starts is None and len(claimed) == slots and self._slots.locked())
        # An idle worker's pickup of one task logs it once its run's first write went
        # (ADR-0131); a claim of more, or a busy worker's, as it starts them: their runs'
        # phase is the drain's, which the lines' place would shift.
        idle = not self.running and len(claimed) == 1
        for each in claimed:
            if each.durable is not None:  # said and renewed once its commit is acknowledged
                log_when_durable(each.claim, each.durable)
                self.renewer.add_once_durable(each.claim, each.durable, self.running)
            elif idle:
                self._unlogged.append(each.claim)
            else:
                log_claim(each.claim)
            self._start(each.claim, each.loaded, renew=each.durable is None)
        return len(claimed)

    def _own_tasks(self) -> set[str]:
        """The tasks this worker runs, holds or waits to run, whatever their epoch: never
        claimed again by it, though a renewal held up past the lease left them claimable
        (ADR-0079). Its renewer renews them late if no one else took them."""
        held = self.running.keys() | self.holding.keys() | self.adopted.keys()
        return {task_id for task_id, _ in held} | self._ahead.task_ids()

    def _start(self, claim: Claim, loaded: LoadedTask | None = None, renew: bool = True) -> None:
        if renew:
            self.renewer.add(claim)
        running = self._run_claim(claim, loaded)
        task = asyncio.create_task(running, name=f"noeta-task-{claim.task_id}")
        self._ahead.timing(task)
        self.running[claim.key] = (claim, task)

    async def _run_claim(self, claim: Claim, loaded: LoadedTask | None = None) -> RunResult | None:
        """Run one claim; every way of losing it ends here, logged, never raised."""
        holding = False
        follow: tuple[str, ...] = ()
        started: ClaimedTask | None = None
        settled = False
        try:
            result = await self.runner.run(claim, loaded)
            settled = True
            follow = follow_on(claim.task_id, result, self.quiet_canvases)
            started = result.started
            log.info("task %s: %s", claim.task_id, result.state.finished or result.outcome)
            self.presence.count(result.state.finished)
            holding = result.outcome == "holding"
            if result.outcome == "handed_back":
                await self._housekeeping.release(claim, "its step done")
            if holding:
                await self._hold(claim, result.state)
            return result
        except Conflict as error:
            log.warning(
                "conflict on task %s: %s; writing nothing more", claim.task_id, error.reason
            )
        except CommitUnknown as error:
            log.warning("task %s: claim lost (%s)", claim.task_id, error)
            if isinstance(error, ClaimUnknown):  # its write may have claimed a task for us
                self._spawn(self._adopt_claimed(error.task_id))
        except StoreUnavailable as error:
            log.warning("task %s: store unavailable (%s); leaving it", claim.task_id, error)
        except StoreError as error:
            log.warning("task %s: %s; leaving it", claim.task_id, error)
        except Exception:
            log.exception("task %s: the runner failed; leaving it", claim.task_id)
        finally:
            if not settled:  # the store may still record the claim as ours
                self._ran_to_unknown_end(claim)
            result_came = claim.key in self._resume_on_hold
            self._resume_on_hold.discard(claim.key)
            if not holding:  # a holding claim stays renewed; everything else is let go
                self.renewer.remove(claim)
                if self.jobs.has_jobs(claim):  # most runs start none: no task for nothing
                    self._spawn(self.jobs.stop(claim, "its claim ended"))
            self.running.pop(claim.key, None)
            if claim.key in self._freed:
                self._freed.discard(claim.key)  # its slot went as it sent its finish
            elif started is not None:
                await self._continue_started(started)  # in this slot, or handed back
            elif not (follow and await self._continue(follow)):
                self._slots.release()  # else the slot is the continuing run's
            if holding and result_came:
                self._resume_holding(claim)  # not held for a result already delivered
            self.wake()
        return None

    def _finishing(self, claim: Claim, state: TaskState) -> None:
        """A run is sending its task's finish, its last write: its slot is free from now,
        so the claim that fills it can share that finish's round trip and commit
        (ADR-0116). Not a canvas or a canvas's member, whose end may be continued in its
        slot (ADR-0109), nor while stopping."""
        self.renewer.finishing(claim)  # a round that finds it finished has not lost it
        if (
            claim.key not in self.running
            or claim.key in self._freed
            or self._stopping
            or state.parent
            or state.canvas is not None
        ):
            return
        self._freed.add(claim.key)
        self._slots.release()

    def _lost(self, claim: Claim) -> None:
        if self._ahead.drop(claim.key):
            log.warning("task %s: claim lost while it waited for a slot", claim.task_id)
        entry = self.running.get(claim.key)
        if entry is not None and not self._handing_back:
            log.warning("task %s: claim lost; cancelling its step", claim.task_id)
            tracing.claim_lost(claim.task_id)  # its spans are the next claimer's to report
            entry[1].cancel()
        self.holding.pop(claim.key, None)
        self.adopted.pop(claim.key, None)
        # Whatever ran under the claim goes with it; the next claimer records it as lost.
        self._spawn(self.jobs.stop(claim, "claim lost"))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        future = asyncio.ensure_future(work)
        self._background.add(future)
        future.add_done_callback(self._background.discard)

    async def _idle(self, stopping: asyncio.Task[bool]) -> None:
        # No NOTIFY says a lease lapsed or a timer fell due: ask the store when that is.
        timeout = self.settings.poll_seconds
        if self._claim_failures.count:
            # A wake-up (the listener reconnecting) cuts it short.
            timeout = self._claim_failures.wait()
        elif self.registration is not None:  # its registration said when, in its round trip
            timeout = self.registration.wait_seconds(timeout)
        else:
            with contextlib.suppress(StoreError):
                due = await self.store.seconds_until_due(self.settings.queues)
                if due is not None:
                    timeout = min(timeout, due + 0.005)
        self.liveness.turned(CLAIM_LOOP, timeout)
        woken = await self._wake.wait(timeout, stopping)  # a call resumes it next turn
        if not woken and self.registration is not None:
            self.registration.waited_out()  # the poll, or a due time: claim

    async def _shut_down(self, hand_back: asyncio.Event | None) -> None:
        """Let running steps end within the grace, then hand back every running or adopted
        task at once (a holding wait keeps its claim)."""
        self._stopping = True
        housekeeping = self._housekeeping
        housekeeping.met(self._claim_failures.last)  # an outage: what follows lapses
        if self.registration is not None and not housekeeping.unreachable:
            housekeeping.met(await self.registration.leave())
        self.runner.draining = True  # each run hands its task back after its step
        entries = list(self.running.values())
        await drain([task for _, task in entries], self.settings.grace_seconds, hand_back)
        self._handing_back = True
        self.cut_off = [claim for claim, task in entries if not task.done()]
        for _, task in entries:
            task.cancel()
        for _, task in entries:
            with contextlib.suppress(BaseException):
                await task
        waiting = list(self.adopted.values()) + self._ahead.take_all()
        self.adopted.clear()
        for claim in [claim for claim, _ in entries] + waiting:
            cut = "its step cut off" if claim in self.cut_off else "not started"
            await housekeeping.release(claim, cut)
        housekeeping.report()
        # Holding waits keep their claim (they lapse with the lease); their jobs cannot
        # outlive this process, so the next claimer will record them as lost.
        await self.jobs.stop_all()
