"""Which claim a worker sends: the one that starts fresh jobs (ADR-0101) only while its
claims find jobs; the plain claim, half as costly for PostgreSQL to plan, otherwise; and
whether it is held open for its runs' first write (ADR-0136, ADR-0147)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from noeta.core import failpoints
from noeta.core.ports.store import ClaimedTask, ClaimKey, JobStarts, LoadedTask

AFTER_COMMIT = "claim.after_commit"
# Failpoints between a claim's commit and its run's first write: armed, no claim is held.
AFTER_A_CLAIMS_COMMIT = (AFTER_COMMIT, "append.before_commit")

# What a fresh job's log holds before its first run: its creation, its one call, and at
# most the pin of a run that stopped before it began (ADR-0101), or a canvas member's pin
# and link to its canvas (ADR-0104). Read by type alone.
_FRESH_JOB = ("TaskCreated", "CallRequested")
_FRESH_JOB_ENDS = ((), ("PluginsPinned",), ("PluginsPinned", "SubtaskOf"))


def fresh_job(loaded: LoadedTask | None) -> bool:
    """The task, as a plain claim read it, is a fresh plain job: one a starting claim
    would have started (or would, but for a pin its claimer lacks)."""
    if loaded is None or loaded.snapshot is not None or loaded.inbox:
        return False
    types = tuple(event.type for event in loaded.events)
    return types[:2] == _FRESH_JOB and types[2:] in _FRESH_JOB_ENDS


class ClaimForm:
    """The claim follows what the last claim that took anything found: a fresh job among
    its tasks, the starting claim next; none, the plain one. A job a plain claim takes is
    run as any task (its run's first append starts it): one append more, once per switch.
    A worker of agent tasks alone sends the plain claim after its first; one of jobs, the
    starting claim always (ADR-0101: the starting claim's planning costs the server about
    twice the plain claim's, at every call, whatever it takes)."""

    def __init__(self) -> None:
        self._jobs_seen = True  # a worker starts by asking: its backlog may be jobs

    def starts(self, allowed: JobStarts | None) -> JobStarts | None:
        """What to ask the next claim to start: `allowed` (the runner's, ADR-0101) while
        jobs are being found, else nothing."""
        return allowed if self._jobs_seen else None

    def found(self, claimed: Sequence[ClaimedTask], asked: JobStarts | None) -> None:
        """After a claim that was sent with `asked`: what it took decides the next form."""
        if not claimed:
            return  # nothing learnt: an empty queue says nothing of its next task
        if asked is not None:
            self._jobs_seen = any(each.loaded and each.loaded.started_by_claim for each in claimed)
        else:
            self._jobs_seen = any(fresh_job(each.loaded) for each in claimed)


def holds(
    starts: JobStarts | None, running: Collection[ClaimKey], finishing: Collection[ClaimKey]
) -> bool:
    """Whether a claim's transaction stays open for its runs' first write, one commit for
    both (ADR-0136): a claim of agent tasks sent while none of the worker's runs will
    write again, the worker idle or each run sending its finish (a drain's next
    generation, ADR-0147). Not beside a run mid-step: the drain's groups would stay apart,
    each claim waiting on the claims' connection for the other group's held round. Not a
    claim that starts jobs (durable before their calls), nor one whose commit a fault
    test or drill acts after."""
    quiet = all(key in finishing for key in running)
    return starts is None and quiet and not failpoints.armed(*AFTER_A_CLAIMS_COMMIT)
