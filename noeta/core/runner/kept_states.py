"""A canvas's folded state kept by the runner between its steps (ADR-0120): the next claim
of it by the same worker folds only the log after what it holds, instead of decoding and
folding its log since the last snapshot at every step of a chain; and, told what it holds,
the claim reads only that much (ADR-0122)."""

from __future__ import annotations

from dataclasses import dataclass

from noeta.core.ports.store import Claim, KnownLog
from noeta.core.rules.canvas import member_count
from noeta.core.rules.task_state import TaskState

# How many canvases a runner keeps a state for, most recent last (a bound, not a tuning).
KEPT_CANVASES = 256
# And how much they may hold together, weighed as their members plus their ends: a state
# holds its tree and every end come back, so 256 chords of 10,000 would be gigabytes. A
# canvas heavier than this alone is never kept (its claims read as before).
KEPT_WEIGHT = 100_000


@dataclass(frozen=True, slots=True)
class Kept:
    """A canvas's state as the run of the claim of `epoch` left it, the seq of the last
    snapshot that run read or wrote, and the canvas's member count (weighed once)."""

    epoch: int
    state: TaskState
    snapshot_seq: int
    members: int

    @property
    def weight(self) -> int:
        return self.members + len(self.state.canvas_results)


class KeptStates:
    """The state each of the last canvases this runner ran was left in, with the epoch of
    the claim that wrote it. It is the truth for the next claim only if that claim is the
    very next one (epoch + 1: nobody claimed the canvas in between) and the log holds all
    of it (`load_for_run` checks the seqs); anything else reads as before."""

    def __init__(self, bound: int = KEPT_CANVASES, weight: int = KEPT_WEIGHT) -> None:
        self._states: dict[str, Kept] = {}
        self._bound = bound
        self._max_weight = weight
        self._weight = 0

    def known(self, task_id: str) -> KnownLog | None:
        """What a claim of `task_id` may be told this runner holds (not taken)."""
        kept = self._states.get(task_id)
        return None if kept is None else KnownLog(task_id, kept.epoch, kept.state.last_seq)

    def take(self, claim: Claim) -> Kept | None:
        """The state kept for `claim`'s task if it was left by the claim just before it;
        taken either way: the run that follows keeps its own, or nothing."""
        kept = self._states.pop(claim.task_id, None)
        if kept is None:
            return None
        self._weight -= kept.weight
        return kept if kept.epoch + 1 == claim.epoch else None

    def keep(
        self, claim: Claim, state: TaskState, snapshot_seq: int, before: Kept | None = None
    ) -> None:
        """`state`, as `claim`'s run ended with every append of it landed: a canvas that
        waits for its members (its next claim continues from it). Nothing else is kept.
        `before`: the state that run started from, whose member count holds."""
        if state.canvas is None or state.finished:
            return
        same = before is not None and before.state.canvas is state.canvas
        members = before.members if before is not None and same else member_count(state.canvas)
        kept = Kept(claim.epoch, state, snapshot_seq, members)
        if kept.weight > self._max_weight:
            return
        if (old := self._states.pop(claim.task_id, None)) is not None:
            self._weight -= old.weight
        self._states[claim.task_id] = kept
        self._weight += kept.weight
        while len(self._states) > self._bound or self._weight > self._max_weight:
            oldest = next(iter(self._states))
            self._weight -= self._states.pop(oldest).weight

    @property
    def weight(self) -> int:
        """The members and ends the kept states hold together."""
        return self._weight
