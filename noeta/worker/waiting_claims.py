"""Claims the worker holds without running them: adopted ones waiting for a slot (after
a lost claim reply), ones claimed ahead while every slot was busy (ADR-0158), held ones
waiting for a job's result, a wake-up or a cancel, and a task given up as unrunnable
(ADR-0092). The claim loop itself is `noeta.worker.worker`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from datetime import datetime
from typing import Any

from noeta.core.errors import CommitUnknown, StoreError
from noeta.core.ports.store import CANCEL_KEY, Claim, ClaimKey, LoadedTask, Store
from noeta.core.rules import wakeups
from noeta.core.rules.task_state import TaskState
from noeta.core.runner.task import RunResult, TaskRunner
from noeta.health.liveness import Liveness
from noeta.worker.claim_form import ClaimForm
from noeta.worker.claim_lines import log_claim
from noeta.worker.claims_ahead import ClaimsAhead
from noeta.worker.lost_claims import adopted_load
from noeta.worker.renewal import Renewer
from noeta.worker.settings import WorkerSettings
from noeta.worker.shutdown import Housekeeping

log = logging.getLogger("noeta.worker")
CLAIM_LOOP = "claim loop"  # its name in the liveness report
# Claims a worker remembers having run to an unknown end (lost_claims.py): a few a fault.
RAN_UNSETTLED_KEPT = 1024


class WaitingClaims:
    """The part of `Worker` that keeps claims waiting; its state is the worker's."""

    store: Store
    runner: TaskRunner
    settings: WorkerSettings
    renewer: Renewer
    running: dict[ClaimKey, tuple[Claim, asyncio.Task[RunResult | None]]]
    holding: dict[ClaimKey, Claim]
    adopted: dict[ClaimKey, Claim]
    _resume_on_hold: set[ClaimKey]
    _slots: asyncio.Semaphore
    _stopping: bool
    _began: datetime | None
    _ran_unsettled: dict[ClaimKey, None]
    _ahead: ClaimsAhead
    _claim_form: ClaimForm
    _housekeeping: Housekeeping
    liveness: Liveness
    offers: tuple[str, ...] | None

    def _own_tasks(self) -> set[str]:
        raise NotImplementedError  # the worker's: the tasks it runs, holds or waits to run

    def _start(self, claim: Claim, loaded: LoadedTask | None = None) -> None:
        raise NotImplementedError  # the worker's: start running a claim

    async def _run_claim(self, claim: Claim, loaded: LoadedTask | None = None) -> RunResult | None:
        raise NotImplementedError  # the worker's: run one claim to its end

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        raise NotImplementedError  # the worker's: keep a background future

    def _ran_to_unknown_end(self, claim: Claim) -> None:
        """A run of `claim` ended with the claim's fate unknown (its finish's commit lost,
        the store down): the store may still record it as ours, and an adoption of it must
        not take the call this run made for the claim's fresh start (lost_claims.py)."""
        self._ran_unsettled[claim.key] = None
        while len(self._ran_unsettled) > RAN_UNSETTLED_KEPT:
            del self._ran_unsettled[next(iter(self._ran_unsettled))]

    async def _hold(self, claim: Claim, state: TaskState) -> None:
        """The run holds its claim (a job of its runs here): renewed, resumed when its
        next wake-up falls due, if it has one."""
        self.holding[claim.key] = claim
        due = wakeups.next_due(state)
        if due is not None:
            await self._resume_when_due(claim, due)

    async def _adopt(self) -> bool:
        """After a lost claim reply: run the tasks the store records as ours, not running.

        The first uses the slot the claim loop holds; the rest are renewed from now on and
        start as slots free up (a claim left unrenewed while it waits would lapse unrun).
        """
        claims = await self._renew_owned()
        if not claims:
            return False
        version = self.runner.snapshot_version
        self._start(
            claims[0],
            await adopted_load(self.store, claims[0], version, self._began, self._ran_unsettled),
        )
        for claim in claims[1:]:
            self.adopted[claim.key] = claim
            self._spawn(self._start_adopted(claim))
        return True

    async def _claim_ahead(self) -> None:
        """Claim the next tasks while every slot is busy, to wait for a slot (ADR-0158):
        the plain claim, renewed from now on, none in a queue with settings."""
        settings = self.settings
        try:
            claimed = await self.store.claim_and_load(
                settings.name,
                settings.queues,
                settings.lease_seconds,
                limit=self._ahead.size,
                snapshot_version=self.runner.snapshot_version,
                excluding=self._own_tasks(),
                offers=self.offers,
                ahead=True,
            )
        except CommitUnknown:  # what it claimed, if anything, waits for a slot as adopted
            log.warning("claim ahead: the commit's outcome is unknown; adopting what is ours")
            self._ahead.took([], 0.0)
            for claim in await self._renew_owned():
                self.adopted[claim.key] = claim
                self._spawn(self._start_adopted(claim))
            return
        except StoreError as error:  # the claim loop's next claim meets it too
            log.warning("claim ahead: %s", error)
            self._ahead.took([], 0.0)
            return
        self._claim_form.found(claimed, None)
        for each in claimed:
            self.renewer.add(each.claim)
            log_claim(each.claim)
        self._ahead.took(claimed, asyncio.get_running_loop().time())

    async def _slot_when_busy(
        self, stop: asyncio.Event, stopping: asyncio.Task[bool]
    ) -> bool | None:
        """Every slot is busy: claim ahead where it pays (ADR-0158), then wait for a slot
        (True), the stop (False), or as long as the tasks claimed ahead may wait (None:
        they were handed back)."""
        if self._ahead.wanted:
            await self._claim_ahead()
        self.liveness.turned(CLAIM_LOOP, None)  # a run may rightly take hours
        acquired = asyncio.create_task(self._slots.acquire())
        timeout = self._ahead.wait_seconds(asyncio.get_running_loop().time())
        await asyncio.wait({acquired, stopping}, timeout=timeout, return_when="FIRST_COMPLETED")
        if acquired.done() and not stop.is_set():
            return True
        if acquired.done():
            self._slots.release()
        else:
            acquired.cancel()
        if stop.is_set():
            return False
        await self._hand_back_ahead()
        return None

    async def _hand_back_ahead(self) -> None:
        """The tasks claimed ahead that no slot took in time, for whoever claims next."""
        for claim in self._ahead.take_all():
            self.renewer.remove(claim)
            await self._housekeeping.release(claim, "no slot freed for it")

    async def _adopt_claimed(self, task_id: str) -> None:
        """A write whose outcome is unknown carried a claim of `task_id` for this worker
        (`ClaimUnknown`: a canvas member's finish, ADR-0121): if the store records it as
        ours, run it as an adopted claim (renewed while it waits for a slot), rather than
        leave it to its lease (ADR-0122). If the write did not land, nothing is ours."""
        for claim in await self._renew_owned(task_id):
            self.adopted[claim.key] = claim
            await self._start_adopted(claim)

    async def _renew_owned(self, only: str | None = None) -> list[Claim]:
        """The claims the store records as this worker's that it neither runs, holds nor
        has adopted or claimed ahead (`only`: of that task alone), renewed from now on; by
        task id."""
        here = self.running.keys() | self.holding.keys() | self.adopted.keys()
        here |= self._ahead.keys()
        try:
            owned = await self.store.owned_by(self.settings.name)
            owned = [c for c in owned if c.key not in here and only in (None, c.task_id)]
            renewed = await self.store.renew(owned, self.settings.lease_seconds)
        except StoreError as error:
            log.warning("adopting: %s", error)
            return []
        claims = sorted(renewed.values(), key=lambda claim: claim.task_id)
        for claim in claims:
            log.info("adopted task %s (epoch %d)", claim.task_id, claim.epoch)
            self.renewer.add(claim)
        return claims

    async def _give_up(self, task_id: str) -> None:
        """No live worker offered what the task needs for `unrunnable_after`: claim it
        whatever it needs, so its run fails it plugin_missing at once (ADR-0092)."""
        if self._stopping or self._slots.locked():
            return  # a slot comes free within a round or two: the task waits that long
        await self._slots.acquire()
        settings = self.settings
        try:
            claim = await self.store.claim_task(settings.name, task_id, settings.lease_seconds)
        except BaseException:
            self._slots.release()
            raise
        if claim is None:
            self._slots.release()  # someone else took it meanwhile
            return
        self.runner.load_attempts.give_up_next(task_id)
        self._start(claim)

    async def _start_adopted(self, claim: Claim) -> None:
        await self._slots.acquire()
        if self.adopted.pop(claim.key, None) is None or self._stopping:
            self._slots.release()  # lost while it waited, or the worker is stopping
            return
        version = self.runner.snapshot_version
        loaded = await adopted_load(self.store, claim, version, self._began, self._ran_unsettled)
        self._start(claim, loaded)

    async def _resume_when_due(self, claim: Claim, due: datetime) -> None:
        """A task holding its claim for a job has a wake-up pending: nothing will be
        delivered when it falls due, so run the task again then (store clock)."""
        try:
            wait = (due - await self.store.clock()).total_seconds()
        except StoreError:
            return  # the wake-up is taken when the job's result resumes the task
        loop = asyncio.get_running_loop()
        loop.call_later(max(0.0, wait) + 0.005, self._resume_holding, claim)

    async def _watch_holding(self) -> None:
        """A cancel reaches a task holding its claim within a renewal round: nothing else
        would run it before its job ends (which may take an hour)."""
        while True:
            await asyncio.sleep(self.settings.lease_seconds / 3)
            for claim in list(self.holding.values()):
                try:
                    inbox = await self.store.read_inbox(claim.task_id)
                except StoreError:
                    break  # the renewer decides what an outage costs; look next round
                if any(entry.dedupe_key == CANCEL_KEY for entry in inbox):
                    self._resume_holding(claim)

    def _resume_holding(self, claim: Claim) -> None:
        """A job's result is in the inbox, a wake-up fell due or a cancel came: run the
        task again under the claim it holds (if it still holds it; a resumed task that
        finds nothing to do holds again)."""
        held = self.holding.pop(claim.key, None)
        if held is None and claim.key in self.running:
            self._resume_on_hold.add(claim.key)  # it may be about to hold: see _run_claim
        if held is None or self._stopping:
            return
        self._spawn(self._resume(held))

    async def _resume(self, claim: Claim) -> None:
        await self._slots.acquire()
        log.info("task %s: resuming under its held claim", claim.task_id)
        task = asyncio.create_task(self._run_claim(claim), name=f"noeta-task-{claim.task_id}")
        self.running[claim.key] = (claim, task)
