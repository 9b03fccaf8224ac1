"""Task-level limits: how often a claim may find a log it cannot load before giving up."""

from __future__ import annotations

from dataclasses import dataclass, field

# Claims in a row, on one worker, with the log unchanged, that could not load the task
# (an unreadable log, a missing plugin); then the task fails.
LOAD_ATTEMPTS = 3


@dataclass
class LoadAttempts:
    """Counts failed loads per (task, last seq) on this worker; a changed log starts over."""

    counts: dict[tuple[str, int], int] = field(default_factory=dict)
    # Tasks whose next failed load fails them: they waited too long for a worker that
    # could run them (ADR-0092), so another claim would only wait longer.
    given_up: set[str] = field(default_factory=set)

    def give_up_next(self, task_id: str) -> None:
        self.given_up.add(task_id)

    def failed(self, task_id: str, last_seq: int) -> int:
        """Record one more failed load; return how many in a row (LOAD_ATTEMPTS at once
        for a task given up)."""
        if task_id in self.given_up:
            self.given_up.discard(task_id)
            return LOAD_ATTEMPTS
        for key in [key for key in self.counts if key[0] == task_id and key[1] != last_seq]:
            del self.counts[key]
        key = (task_id, last_seq)
        self.counts[key] = self.counts.get(key, 0) + 1
        return self.counts[key]

    def forget(self, task_id: str) -> None:
        for key in [key for key in self.counts if key[0] == task_id]:
            del self.counts[key]
