"""A canvas's folded state kept by the runner between its steps (ADR-0120): the next claim
of it by the same worker folds only the log after what it holds, instead of decoding and
folding its log since the last snapshot at every step of a chain."""

from __future__ import annotations

from noeta.core.ports.store import Claim
from noeta.core.rules.task_state import TaskState

# How many canvases a runner keeps a state for, most recent last (a bound, not a tuning).
KEPT_CANVASES = 256


class KeptStates:
    """The state each of the last canvases this runner ran was left in, with the epoch of
    the claim that wrote it. It is the truth for the next claim only if that claim is the
    very next one (epoch + 1: nobody claimed the canvas in between) and the log holds all
    of it (`load_for_run` checks the seqs); anything else reads as before."""

    def __init__(self, bound: int = KEPT_CANVASES) -> None:
        self._states: dict[str, tuple[int, TaskState]] = {}
        self._bound = bound

    def take(self, claim: Claim) -> TaskState | None:
        """The state kept for `claim`'s task if it was left by the claim just before it;
        taken either way: the run that follows keeps its own, or nothing."""
        kept = self._states.pop(claim.task_id, None)
        if kept is None or kept[0] + 1 != claim.epoch:
            return None
        return kept[1]

    def keep(self, claim: Claim, state: TaskState) -> None:
        """`state`, as `claim`'s run ended with every append of it landed: a canvas that
        waits for its members (its next claim continues from it). Nothing else is kept."""
        if state.canvas is None or state.finished:
            return
        self._states[claim.task_id] = (claim.epoch, state)
        while len(self._states) > self._bound:
            del self._states[next(iter(self._states))]
