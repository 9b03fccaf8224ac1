"""The task store port: the `Store` protocol, its value types and its errors.

A task is a row plus an append-only log. The store guarantees one writer per task:
every `append` checks, in the same transaction as the write, that the claim's epoch is
still the task's and its lease is valid, and that the log ends at `expected_seq`.
Adapters live in `noeta/backends/stores/`; their shared test suite in
`noeta/testing/store_contract/`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Literal, Protocol

from noeta.core import payload
from noeta.core.errors import (
    CommitUnknown,
    ConfigError,
    Conflict,
    NoetaError,
    PayloadError,
    SchemaMismatch,
    StoreError,
    StoreUnavailable,
    UnknownTask,
)
from noeta.core.payload import JSONValue
from noeta.core.task_id import check_task_id

__all__ = [
    "Claim",
    "CommitUnknown",
    "Conflict",
    "Continue",
    "CronFire",
    "CronFireRecord",
    "Delivery",
    "FireOutcome",
    "Finish",
    "InboxEntry",
    "LateResult",
    "NewEvent",
    "NewTask",
    "NextState",
    "NoetaError",
    "PayloadError",
    "SchemaMismatch",
    "Snapshot",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "StoredEvent",
    "TaskRecord",
    "TaskStatus",
    "UnknownTask",
    "Wait",
    "WaitHolding",
]

DEFAULT_QUEUE = "default"
# The dedupe key of a cancel request (`noeta cancel`): it wakes a task whatever it waits on.
CANCEL_KEY = "cancel"
# Ids, queue names, event types and dedupe keys are indexed: btree keys fail past ~2.7 kB.
MAX_KEY_CHARS = 512


def check_lease(lease_seconds: float) -> float:
    """A lease is a finite number of seconds above zero."""
    if not (math.isfinite(lease_seconds) and lease_seconds > 0):
        raise ConfigError(f"a lease must be a positive number of seconds, not {lease_seconds}")
    return lease_seconds


def check_append(events: Sequence[NewEvent], take: Sequence[int]) -> None:
    """An append that takes inbox entries must record them in at least one event."""
    if take and not events:
        raise ValueError("an append that takes inbox entries needs an event that records them")


def check_moment(moment: datetime | None) -> datetime | None:
    """Due times must say their time zone: a naive one means different things to each host."""
    if moment is not None and moment.utcoffset() is None:
        raise ConfigError(f"{moment!r} has no time zone; the store needs an aware datetime")
    return moment


def check_key(kind: str, value: str) -> str:
    """Refuse, before any write, a name or key no index or UTF-8 column can hold."""
    if not value and kind != "dedupe key":
        raise PayloadError(f"a {kind} must not be empty")
    if len(value) > MAX_KEY_CHARS:
        raise PayloadError(f"a {kind} is {len(value)} characters; the limit is {MAX_KEY_CHARS}")
    if "\x00" in value:
        raise PayloadError(f"a {kind} must not contain a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise PayloadError(f"a {kind} must be valid Unicode (it has a lone surrogate)") from None
    return value


class TaskStatus(StrEnum):
    READY = "ready"  # claimable once due
    RUNNING = "running"  # claimed; claimable again when the lease expires
    HOLDING = "holding"  # waiting while keeping its claim (e.g. a background job runs)
    WAITING = "waiting"  # handed back; claimable when due or when something is delivered
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (TaskStatus.DONE, TaskStatus.FAILED, TaskStatus.CANCELLED)


ClaimKey = tuple[str, int]  # (task id, epoch)


@dataclass(frozen=True, slots=True)
class Claim:
    """The right to write one task, for one epoch, until the lease ends (database clock)."""

    task_id: str
    worker: str
    epoch: int
    lease_until: datetime
    # The claim took the task from a worker whose lease had lapsed (for logs and metrics).
    taken_over: bool = field(default=False, compare=False)

    @property
    def key(self) -> ClaimKey:
        """What identifies the claim whatever its lease: a worker's bookkeeping for one
        epoch must never touch the next (the same worker may claim the task again)."""
        return (self.task_id, self.epoch)


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append: a type name and a JSON value (see `noeta.core.payload`)."""

    type: str
    data: JSONValue


@dataclass(frozen=True, slots=True)
class StoredEvent:
    task_id: str
    seq: int
    type: str
    data: JSONValue
    created_at: datetime
    # The claim that appended it, recorded by the store's fenced append (never by the
    # client): its epoch and the owner the task row named. 0 and None for the events a
    # task was created with.
    epoch: int = 0
    owner: str | None = None


@dataclass(frozen=True, slots=True)
class NewTask:
    """A task to create; its first events (usually the task-created event) are its log."""

    id: str
    events: Sequence[NewEvent]
    queue: str = DEFAULT_QUEUE
    ready_at: datetime | None = None  # None: claimable at once

    def __post_init__(self) -> None:
        # Every way a task is made (submit, run, cron, the API, subtasks) builds a NewTask.
        check_task_id(self.id)


@dataclass(frozen=True, slots=True)
class Delivery:
    """Something for a task's inbox: a message, a handback, an answer, a job result."""

    task_id: str
    payload: JSONValue
    dedupe_key: str | None = None  # a second delivery with the same key is dropped


@dataclass(frozen=True, slots=True)
class InboxEntry:
    id: int
    task_id: str
    payload: JSONValue
    dedupe_key: str | None
    taken_seq: int | None  # the log seq of the append that took it; None while untaken
    created_at: datetime


@dataclass(frozen=True, slots=True)
class LoadedTask:
    """What a claimer reads to run a task, in one round trip where the store can."""

    snapshot: Snapshot | None
    events: list[StoredEvent]  # the log after the snapshot (all of it without one)
    inbox: list[InboxEntry]  # untaken entries


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """A task's row as the store keeps it; its history is in the log."""

    id: str
    queue: str
    status: TaskStatus
    owner: str | None
    owner_epoch: int
    lease_until: datetime | None
    ready_at: datetime | None
    last_seq: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class Snapshot:
    task_id: str
    version: str
    seq: int  # the log seq the snapshot folds through
    data: bytes


@dataclass(frozen=True, slots=True)
class LateResult:
    """A tool's result that came back after its claim was gone, kept outside the log.

    Keyed by the call's idempotency key, (task id, call id): one tool invocation. Only a
    hint (ADR-040): the next claimer records it through its own fenced append if the
    call is still half done in the log; otherwise it stays here for the operator.
    """

    task_id: str
    call_id: str
    content: str
    is_error: bool
    epoch: int  # the epoch of the claim the call ran under
    worker: str
    created_at: datetime | None = None  # set by the store


def check_late_result(result: LateResult) -> str:
    """Check a late result before any write; return its content, encoded."""
    check_key("task id", result.task_id)
    check_key("call id", result.call_id)
    check_key("worker name", result.worker)
    if isinstance(result.epoch, bool) or not isinstance(result.epoch, int) or result.epoch < 1:
        raise PayloadError(
            f"a late result's epoch is a claim's epoch (1 or more), not {result.epoch!r}"
        )
    return payload.encode(result.content)


# What the task does after an append.


@dataclass(frozen=True, slots=True)
class Continue:
    """Keep running under the same claim."""


@dataclass(frozen=True, slots=True)
class Wait:
    """Hand the task back; it is claimable at `until`, or when something is delivered.

    With `wake_on_prefix`, only a delivery whose dedupe key starts with it (or a cancel
    request, CANCEL_KEY) wakes the task; others wait in the inbox: a task waiting for one
    answer is not spun by chat.
    """

    until: datetime | None = None
    wake_on_prefix: str | None = None


@dataclass(frozen=True, slots=True)
class WaitHolding:
    """Wait but keep the claim (and keep renewing it); claimable by others only if it lapses."""


@dataclass(frozen=True, slots=True)
class Finish:
    status: TaskStatus = TaskStatus.DONE

    def __post_init__(self) -> None:
        if not self.status.finished:
            raise ValueError(f"Finish needs a finished status, not {self.status}")


NextState = Continue | Wait | WaitHolding | Finish


# Cron: what a scheduler asks the store to do with one slot of one schedule.


class FireOutcome(StrEnum):
    CREATED = "created"  # the fire created its task
    DELIVERED = "delivered"  # the fire delivered its message
    SKIPPED_OVERLAP = "skipped_overlap"  # the previous fire's task or message is pending
    MISSED = "missed"  # a slot missed during downtime, recorded and not run
    NO_TARGET = "no_target"  # the message's task does not exist or has finished
    ALREADY = "already"  # this slot was handled before, by this or another scheduler


@dataclass(frozen=True, slots=True)
class CronFire:
    """One slot of one schedule: create `action`'s task or deliver its message, or with
    no action record the slot as missed. At most once per (schedule, slot), ever."""

    schedule: str
    slot: datetime
    action: NewTask | Delivery | None
    overlap: Literal["skip", "allow"] = "skip"
    detail: str = ""


def cron_message_key(schedule: str, slot: datetime) -> str:
    """The dedupe key of a cron message: one delivery per slot, and the prefix
    `cron:<schedule>:` is how the store finds the previous one for overlap 'skip'."""
    return f"cron:{schedule}:{slot.astimezone(UTC).isoformat()}"


def check_cron_fire(fire: CronFire) -> None:
    check_key("schedule name", fire.schedule)
    check_moment(fire.slot)
    action = fire.action
    if isinstance(action, Delivery) and action.dedupe_key != cron_message_key(
        fire.schedule, fire.slot
    ):
        raise ValueError("a cron message's dedupe key must be cron_message_key(schedule, slot)")


@dataclass(frozen=True, slots=True)
class CronFireRecord:
    schedule: str
    slot: datetime
    outcome: FireOutcome
    task_id: str | None
    detail: str
    fired_at: datetime


class Store(Protocol):
    """Durable tasks with one writer each. Every method is a single transaction.

    Raises `StoreUnavailable` when the store cannot be reached and `CommitUnknown` when a
    write's outcome is unknown; neither is ever retried inside the store.
    """

    async def create_task(self, task: NewTask) -> bool:
        """Create the task and its first events; False if a task with that id exists."""
        ...

    async def claim(self, worker: str, queues: Sequence[str], lease_seconds: float) -> Claim | None:
        """Claim the claimable task that has been due longest, bumping its epoch."""
        ...

    async def seconds_until_due(self, queues: Sequence[str]) -> float | None:
        """How long until a task in `queues` becomes claimable by time (a lease lapsing,
        a timer); None if none will. An idle worker sleeps until then, not a whole poll."""
        ...

    async def queue_depth(self, queues: Sequence[str]) -> Mapping[str, int]:
        """How many tasks each of `queues` holds that a worker could claim now (for the
        queue-depth metric); a queue with none is missing. One index-only count."""
        ...

    async def claim_task(self, worker: str, task_id: str, lease_seconds: float) -> Claim | None:
        """Claim this task if it is claimable now (`noeta run` runs its own task)."""
        ...

    async def renew(self, claims: Sequence[Claim], lease_seconds: float) -> Mapping[str, Claim]:
        """Extend every claim still held; claims missing from the result are lost."""
        ...

    async def release(self, claim: Claim) -> bool:
        """Hand a running task back to ready without ending it; False if not held."""
        ...

    async def append(
        self,
        claim: Claim,
        expected_seq: int,
        events: Sequence[NewEvent],
        *,
        take: Sequence[int] = (),
        deliveries: Sequence[Delivery] = (),
        new_tasks: Sequence[NewTask] = (),
        next_state: NextState = Continue(),
    ) -> int:
        """Append `events` after `expected_seq` and return the new last seq.

        In the same transaction: mark the inbox entries `take` as taken by this append,
        deliver to other tasks, create tasks, and move the task to `next_state`.
        Raises `Conflict` (nothing written) unless the claim's epoch is the task's, its
        lease is valid, the log ends at `expected_seq` and every entry of `take` is untaken.
        """
        ...

    async def deliver(self, delivery: Delivery) -> bool:
        """Put a delivery in a task's inbox; False if its dedupe key was seen before.

        A waiting task becomes claimable. Raises `UnknownTask` for an unknown id.
        """
        ...

    async def read_log(self, task_id: str, after_seq: int = 0) -> list[StoredEvent]: ...

    async def load(self, task_id: str, snapshot_version: str) -> LoadedTask:
        """The snapshot of this version (if any), the log after it, the untaken inbox."""
        ...

    async def read_inbox(self, task_id: str, *, untaken_only: bool = True) -> list[InboxEntry]: ...

    async def get_task(self, task_id: str) -> TaskRecord | None: ...

    async def list_tasks(
        self,
        *,
        status: TaskStatus | None = None,
        queue: str | None = None,
        limit: int = 100,
    ) -> list[TaskRecord]: ...

    async def owned_by(self, worker: str) -> list[Claim]:
        """Claims the store records for `worker` (to adopt after a lost claim reply)."""
        ...

    async def keep_late_result(self, result: LateResult) -> bool:
        """Keep a result a tool returned after its claim was gone; needs no claim.

        Writes neither the log nor the task row. False if a result is kept for this call
        already: the first stays (ADR-040). Raises `UnknownTask` for an unknown task.
        """
        ...

    async def late_results(self, task_id: str) -> list[LateResult]:
        """The late results kept for a task, in the order they were kept."""
        ...

    async def put_snapshot(self, snapshot: Snapshot) -> None: ...

    async def get_snapshot(self, task_id: str, version: str) -> Snapshot | None: ...

    async def clock(self) -> datetime:
        """The store's own clock, which every lease and due time is measured on."""
        ...

    async def wake_due(self, since: datetime) -> tuple[datetime, datetime | None]:
        """Tell idle workers (NOTIFY, where the store has it) of every queue in which a
        task fell due by time in (since, now]; return now and the next due time after it.
        The scheduler calls this so a timer is acted on promptly, not at the next poll."""
        ...

    async def cron_marks(
        self, schedules: Sequence[str], now: datetime, *, advance: Sequence[str] = ()
    ) -> dict[str, datetime]:
        """Each schedule's mark: the latest slot it has handled. A schedule seen for the
        first time is registered at `now`; the `advance` ones (disabled) move up to `now`,
        so that their quiet time is not counted as missed when they are enabled again."""
        ...

    async def fire_cron(self, fire: CronFire) -> FireOutcome:
        """Handle one slot, in one transaction with the task or message it makes."""
        ...

    async def cron_history(self, schedule: str, limit: int = 20) -> list[CronFireRecord]:
        """The schedule's latest handled slots, newest first."""
        ...

    async def close(self) -> None: ...
