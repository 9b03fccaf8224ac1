"""A run's end continued at once in its slot (ADR-0109): a canvas member's finish makes
its canvas claimable, and a canvas's step makes its next member; the worker that ran the
one claims the other straight away, by name, instead of leaving it to a wake-up and the
claim loop. Each is an ordinary claim (epoch, lease, fence); missing it loses nothing:
the task stays claimable for whoever claims next."""

from __future__ import annotations

import logging

from noeta.core.errors import CommitUnknown, StoreError
from noeta.core.ports.append_and_claim import ClaimAfter
from noeta.core.ports.store import Claim, ClaimedTask, JobStarts, Store
from noeta.core.runner.task import RunResult
from noeta.worker.settings import WorkerSettings
from noeta.worker.waiting_claims import WaitingClaims

log = logging.getLogger("noeta.worker")


# How many canvases a worker remembers as waiting on a fan-in (a bound, not a tuning).
QUIET_CANVASES = 1024


def follow_on(task_id: str, result: RunResult, quiet: dict[str, None]) -> tuple[str, ...]:
    """What the run just ended (task `task_id`) made claimable, for its worker to take
    next: a canvas member's canvas (the member's finish handed its end back), or the
    first member a canvas's step created (the next link of a chain; the rest of a group
    are claimed as any task is). `quiet`, updated here: the canvases whose last step
    here launched nothing (a group's fan-in: the next end rarely lets anything start,
    and a claim that finds the canvas busy is a statement for nothing); their members'
    finishes leave them to the ordinary claims."""
    state = result.state
    if state.finished and state.job and state.parent:
        return () if state.parent in quiet else (state.parent,)
    if state.canvas is not None and result.outcome == "waiting":
        if result.created:
            quiet.pop(task_id, None)
            return result.created[:1]
        quiet[task_id] = None
        while len(quiet) > QUIET_CANVASES:
            del quiet[next(iter(quiet))]
    return ()


async def claim_follow_on(
    store: Store,
    settings: WorkerSettings,
    task_ids: tuple[str, ...],
    *,
    snapshot_version: str,
    excluding: set[str],
    offers: tuple[str, ...] | None,
    job_starts: JobStarts | None,
) -> ClaimedTask | None:
    """Claim (and read) one of `task_ids` if it is claimable now, in this worker's queues,
    in none with settings; None otherwise, or on a store error: whoever claims next
    takes it. CommitUnknown is raised: the claim may be this worker's (to adopt)."""
    try:
        claimed = await store.claim_and_load(
            settings.name,
            settings.queues,
            settings.lease_seconds,
            snapshot_version=snapshot_version,
            excluding=excluding,
            offers=offers,
            job_starts=job_starts,
            only=task_ids,
        )
    except CommitUnknown:
        raise
    except StoreError as error:
        log.info("could not continue with %s (%s); it waits for a claim", task_ids[0], error)
        return None
    return claimed[0] if claimed else None


class ContinuingClaims(WaitingClaims):
    """The part of `Worker` that continues a run's end in its slot; its state is the
    worker's."""

    offers: tuple[str, ...] | None
    # The canvases whose last step here launched nothing, oldest first (`follow_on`).
    quiet_canvases: dict[str, None]

    async def _release(self, claim: Claim, why: str) -> None:
        raise NotImplementedError  # the worker's: hand a claim's task back

    def _continues(self, task_id: str, queue: str | None) -> bool:
        """Whether this worker will claim `task_id` (in `queue`; None: its canvas's, not
        known here) when the run that makes it claimable ends, as `follow_on` decides:
        what the run makes claimable for it then calls no idle worker (ADR-0117). Not a
        quiet canvas, not a queue it does not serve, not while stopping."""
        if self._stopping or task_id in self.quiet_canvases:
            return False
        return queue is None or queue in self.settings.queues

    def _claim_after(self, task_id: str) -> ClaimAfter | None:
        """The claim of `task_id` a member's finish makes in its own commit, for this
        worker to run the canvas next (ADR-0121): the claim `_continue` would make after
        it, one round trip sooner; None where this worker will not continue it."""
        if self._stopping or self.runner.draining or task_id in self.quiet_canvases:
            return None
        return ClaimAfter(
            task_id,
            self.settings.name,
            tuple(self.settings.queues),
            self.settings.lease_seconds,
            self.runner.snapshot_version,
            frozenset(self._own_tasks()),
            None if self.offers is None else tuple(self.offers),
            self.runner.job_starts,
            self.runner.kept.known(task_id),  # the claim reads only what came after it
        )

    async def _continue_started(self, started: ClaimedTask) -> None:
        """Run a task the ended run's append created started (ADR-0117) or claimed (ADR-0121) in
        the slot that run held; stopping, hand it back (and the slot) instead."""
        claim = started.claim
        if self._stopping or self.runner.draining:
            try:
                await self._release(claim, "not started")
            finally:
                self._slots.release()
            return
        # Epoch 1: a member its canvas's step created started (ADR-0117); later, a canvas
        # its member's finish claimed (ADR-0121).
        how = "started as created" if claim.epoch == 1 else "claimed with the finish"
        read = started.loaded.after_seq if started.loaded is not None else None
        after = "" if read is None else f", its log read after seq {read}"  # ADR-0122
        log.info("continued with task %s, %s (epoch %d%s)", claim.task_id, how, claim.epoch, after)
        self._start(claim, started.loaded)

    async def _continue(self, task_ids: tuple[str, ...]) -> bool:
        """Claim one of `task_ids` (what the run just ended made claimable) and run it in
        the slot that run held; False if none was claimed (ADR-0109)."""
        if self._stopping or self.runner.draining:
            return False
        try:
            claimed = await claim_follow_on(
                self.store,
                self.settings,
                task_ids,
                snapshot_version=self.runner.snapshot_version,
                excluding=self._own_tasks(),
                offers=self.offers,
                job_starts=self.runner.job_starts,  # a member: started by the claim
            )
        except CommitUnknown:
            log.warning("continuing: the claim's outcome is unknown; adopting what is ours")
            return await self._adopt()
        except BaseException:
            self._slots.release()
            raise
        if claimed is None:
            return False
        if self._stopping:  # the stop came while the claim was in flight: hand it back
            await self._release(claimed.claim, "not started")
            return False
        log.info("continued with task %s (epoch %d)", claimed.claim.task_id, claimed.claim.epoch)
        self._start(claimed.claim, claimed.loaded)
        return True
