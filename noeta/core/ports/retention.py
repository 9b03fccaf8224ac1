"""Retention, a port beside `Store`: pruning finished tasks online, in small batches, and
the durations an operator gives for it (`7d`, `12h`, `30m`).

A pruned task goes whole: its row, log, inbox, snapshots, late results and cron
history. Its id stays taken unless the operator forgets it (ADR-0066).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol, runtime_checkable

from noeta.core.errors import ConfigError, StoreError

# Tasks per transaction: each batch is a short transaction whose locks and WAL burst are
# small, so claims and appends beside it barely wait. bench/prune.py, 100,000 tasks:
# batches of 1,000 raised the claims' p95 by about 1.3x, batches of 250 by about 1.0x.
DEFAULT_BATCH_SIZE = 250
# Events per transaction too (each task's last_seq): one task with millions of events must
# not make every batch time out for ever. The oldest task alone over this goes in parts,
# its log from the top first. (Kept by the 4-argument noeta_prune_finished of 0014 too.)
DEFAULT_BATCH_EVENTS = 20_000
# After each batch a prune rests as long as the batch took: it takes at most about half
# of one server connection's time, and claims and appends beside it keep their pace.
REST_PER_BATCH = 1.0
# Tasks one prune by id takes in one transaction (a bulk prune's batch).
MAX_PRUNED_IDS = 1000

_DURATION = re.compile(r"(\d+)\s*(s|m|h|d|w)")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
DURATION_FORM = "a number and a unit: 30s, 30m, 12h, 7d or 2w"
# Further back than the store's clock can subtract, and than any retention means.
LONGEST_DURATION = timedelta(days=36525)


class PruneRunning(StoreError):
    """Another prune holds the store's prune lock; this one pruned nothing."""


@dataclass(frozen=True, slots=True)
class PruneCounts:
    """What a prune removed (or, dry, would remove)."""

    tasks: int = 0
    events: int = 0

    def __add__(self, other: PruneCounts) -> PruneCounts:
        return PruneCounts(self.tasks + other.tasks, self.events + other.events)


@runtime_checkable
class Pruning(Protocol):
    async def prune_finished(
        self,
        older_than: timedelta,
        *,
        queue: str | None = None,
        forget_ids: bool = False,
        dry_run: bool = False,
        batch_size: int = DEFAULT_BATCH_SIZE,
        batch_events: int = DEFAULT_BATCH_EVENTS,
    ) -> PruneCounts:
        """Remove the tasks that finished (done, failed, cancelled) more than `older_than`
        ago on the store's clock, in `queue` or any, batch by batch, each batch its own
        transaction of at most `batch_size` tasks and `batch_events` events (a task with
        more goes in parts). Kept: a subtask whose parent is live, a task with a live
        subtask. The pruned ids stay taken unless `forget_ids`. `dry_run` counts and removes
        nothing. Raises `PruneRunning` if another prune runs on this store.
        """
        ...

    async def prune_tasks(
        self, task_ids: Sequence[str], *, forget_ids: bool = False
    ) -> PruneCounts:
        """Remove those of `task_ids` that are finished and may be pruned (the family rule
        of `prune_finished`), whole, in one transaction (at most MAX_PRUNED_IDS of them);
        one another holds is left. A bulk prune from the task list, a batch at a time.
        Raises `PruneRunning` if another prune runs on this store."""
        ...


def check_pruned_ids(task_ids: Sequence[str]) -> list[str]:
    if len(task_ids) > MAX_PRUNED_IDS:
        raise ConfigError(
            f"a prune by id takes at most {MAX_PRUNED_IDS} tasks, not {len(task_ids)}"
        )
    return list(task_ids)


def parse_duration(text: str) -> timedelta:
    """`7d`, `12h`, `30m`, `45s`, `2w`, or several (`1d12h`); ConfigError otherwise.
    `0s` is allowed: every finished task is old enough."""
    cleaned = text.strip().lower()
    position, seconds = 0, 0
    for found in _DURATION.finditer(cleaned):
        if found.start() != position:
            break
        seconds += int(found.group(1)) * _UNITS[found.group(2)]
        position = found.end()
    if not cleaned or position != len(cleaned):
        sign = "a negative duration" if cleaned.startswith("-") else "an unreadable duration"
        raise ConfigError(f"{text!r} is {sign}: a duration is {DURATION_FORM}")
    if seconds > LONGEST_DURATION.total_seconds():
        raise ConfigError(f"{text!r} is too long a duration (at most 100 years)")
    return timedelta(seconds=seconds)


def check_batch_size(batch_size: int, batch_events: int = DEFAULT_BATCH_EVENTS) -> int:
    if not 1 <= batch_size <= 100_000:
        raise ConfigError(f"a prune batch is 1 to 100000 tasks, not {batch_size}")
    if not 1 <= batch_events <= 10_000_000:
        raise ConfigError(f"a prune batch is 1 to 10000000 events, not {batch_events}")
    return batch_size
