"""Unique and debounced jobs, a port beside `Store`: a job created only if no other holds
its unique key, kept by the database so racing producers make one job (ADR-0093)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from noeta.core.ports.store_values import NewTask


@dataclass(frozen=True, slots=True)
class KeyRule:
    """How a job holds its key: `unique_for` seconds from its creation (a later enqueue
    in that window gets it back, unless it failed or was cancelled), or `debounce`:
    until it starts (a later enqueue replaces it and starts `debounce` seconds later)."""

    job: str  # the function's name: each job has a key space of its own
    unique_for: float | None = None
    debounce: float | None = None


@runtime_checkable
class UniqueJobs(Protocol):
    async def create_unique_task(self, task: NewTask, key: str, rule: KeyRule) -> str:
        """Create `task` holding `key` by `rule`, or not: the id of the job that holds the
        key afterwards (`task.id` if it was made). With `rule.debounce`, the task starts
        that many seconds from now (by the database's clock), whatever its `ready_at`.
        Sent again with the same task (a lost reply), it returns `task.id`."""
        ...

    async def create_unique_tasks(
        self, tasks: Sequence[NewTask], keys: Sequence[str], rule: KeyRule
    ) -> list[str]:
        """`create_unique_task` of each task in order, in one transaction (all or none):
        the holder's id for each."""
        ...
