"""The values a task store takes and returns: task rows, claims, events, inbox entries,
snapshots, late results, the next state after an append, cron fires; and the checks every
store runs on them before any write. The `Store` protocol itself is in `noeta.core.ports.store`.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Literal

from noeta.core.errors import ConfigError, PayloadError
from noeta.core.ports import payload
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.pin import Pin
from noeta.core.rules.task_id import check_concurrency_key, check_task_id

DEFAULT_QUEUE = "default"
# The dedupe key of a cancel request (`noeta cancel`): it wakes a task whatever it waits on.
CANCEL_KEY = "cancel"
# Ids, queue names, event types and dedupe keys are indexed: btree keys fail past ~2.7 kB.
MAX_KEY_CHARS = 512
# A task's priority within its queue: higher is claimed first, then by due time. A small
# range because the claim probes each priority of a queue once (ADR-0073).
MIN_PRIORITY, MAX_PRIORITY, DEFAULT_PRIORITY = 0, 9, 0


def answer_key(call_id: str) -> str:
    """The dedupe key of a person's answer to an asked call (`noeta answer`): the task
    waits on it as a prefix (`Wait(wake_on_prefix=...)`)."""
    return f"answer:{call_id}"


def check_lease(lease_seconds: float) -> float:
    """A lease is a finite number of seconds above zero."""
    if not (math.isfinite(lease_seconds) and lease_seconds > 0):
        raise ConfigError(f"a lease must be a positive number of seconds, not {lease_seconds}")
    return lease_seconds


MAX_CLAIM_BATCH = 1000  # far above any worker's concurrency; bounds one claim's work


def check_claim_limit(limit: int) -> int:
    """How many tasks one claim may take: 1 to MAX_CLAIM_BATCH."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_CLAIM_BATCH:
        raise ValueError(f"a claim takes 1 to {MAX_CLAIM_BATCH} tasks, not {limit!r}")
    return limit


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


def check_text(kind: str, value: str) -> str:
    """Refuse, before any write, a NUL in text a person gave (a prompt, a message, an id):
    PostgreSQL's text cannot hold one, so every search over it would fail (issue 25)."""
    if "\x00" in value:
        raise PayloadError(f"the {kind} must not contain a NUL character")
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
    """An event to append: a type name and a JSON value (see `noeta.core.ports.payload`)."""

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
class StartedBy:
    """Who claims a task as it is created: `worker`, at epoch 1, for `lease_seconds`; and
    `events`, appended under that claim in the same commit (what a claim that starts a
    job writes: the claimer's pin where the job's differs, its ToolStarted; ADR-0101).
    `needs`: the plugin names of that pin, sorted, if `events` carry one."""

    worker: str
    lease_seconds: float
    events: Sequence[NewEvent]
    needs: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class NewTask:
    """A task to create; its first events (usually the task-created event) are its log."""

    id: str
    events: Sequence[NewEvent]
    queue: str = DEFAULT_QUEUE
    ready_at: datetime | None = None  # None: claimable at once
    # Counted against its queue's per-key limit (a tenant, a repository); None: no key.
    concurrency_key: str | None = None
    priority: int = DEFAULT_PRIORITY
    # The worker creating it claims it next, in the slot its run ends in (a canvas's next
    # member, ADR-0117): no idle worker is called for it. A hint: unclaimed, it waits for
    # the next claim as any task does.
    continued: bool = False
    # Created claimed and started by the appending worker (a canvas's next member,
    # ADR-0117): no claim of its own. Not in a queue with settings: the append raises
    # NotStarted and writes nothing.
    started: StartedBy | None = None

    def __post_init__(self) -> None:
        # Every way a task is made (submit, run, cron, the API, subtasks) builds a NewTask.
        check_task_id(self.id)
        if self.concurrency_key is not None:
            check_concurrency_key(self.concurrency_key)
        check_priority(self.priority)


def check_priority(priority: int) -> int:
    """A priority is an integer from MIN_PRIORITY to MAX_PRIORITY (higher first)."""
    if (
        isinstance(priority, bool)
        or not isinstance(priority, int)
        or not MIN_PRIORITY <= priority <= MAX_PRIORITY
    ):
        raise PayloadError(
            f"a priority is an integer from {MIN_PRIORITY} to {MAX_PRIORITY} "
            f"(higher first), not {priority!r}"
        )
    return priority


@dataclass(frozen=True, slots=True)
class Delivery:
    """Something for a task's inbox: a message, a handback, an answer, a job result."""

    task_id: str
    payload: JSONValue
    dedupe_key: str | None = None  # a second delivery with the same key is dropped
    # The sender's worker claims the receiver next, in the slot the sender's run ends in
    # (a canvas member's handback, ADR-0117): waking it calls no idle worker. A hint, as
    # `NewTask.continued` is.
    continued: bool = False


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
    # The claim that read it also started its job (`JobStarts`): the log ends with the
    # ToolStarted this claim wrote, and the claimer runs the call without writing another.
    started_by_claim: bool = False
    # The claim was told the log its claimer holds (`KnownLog`) and it was the truth:
    # `events` are those after this seq, and no snapshot was read (ADR-0122).
    after_seq: int | None = None


@dataclass(frozen=True, slots=True)
class KnownLog:
    """A task's log as a claimer holds it already, folded (ADR-0120): up to `seq`, as the
    run of the claim of epoch `epoch` left it. A claim told it reads only the events after
    `seq`, and no snapshot, when it is the claim right after that one (epoch + 1: nobody
    claimed the task in between) and the log reaches `seq`; otherwise it reads as ever
    (ADR-0122). A hint: what it says is checked, never trusted."""

    task_id: str
    epoch: int
    seq: int


@dataclass(frozen=True, slots=True)
class JobStarts:
    """Asks `Store.claim_and_load` to start the fresh plain jobs it claims, in the claim's
    own commit: a job whose log is its creation (TaskCreated, CallRequested, at most its
    pin), not taken over, with nothing in its inbox, gets the events its claimer's first
    append would have written: `PluginsPinned(pins)` where its pin differs (every pinned
    name among `pins`, else it is not started), then `ToolStarted` of its call as asked.
    The claimer asks only when that is what its run would write: no gates, no append
    hooks, no live trace (ADR-0101)."""

    pins: tuple[Pin, ...]


@dataclass(frozen=True, slots=True)
class ClaimedTask:
    """A claim and its task as the claim read it (`Store.claim_and_load`). `loaded` is
    None when the store could not read the task with the claim: the claimer loads it.
    `durable`: None where the claim was committed before it was returned; for a claim
    held open for its run's first write (ADR-0136), what says True once it is committed
    (with that write, or alone) and False if it was undone or its commit's outcome is
    unknown: nothing may say the task is claimed before."""

    claim: Claim
    loaded: LoadedTask | None
    durable: Awaitable[bool] | None = None


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
    # What a retry copies (its concurrency key, a tenant; its priority).
    concurrency_key: str | None = None
    priority: int = DEFAULT_PRIORITY


@dataclass(frozen=True, slots=True)
class Snapshot:
    task_id: str
    version: str
    seq: int  # the log seq the snapshot folds through
    data: bytes


# A late result that answers no tool call (ADR-0082): a model reply its worker kept, keyed
# by the epoch of the claim that sent the request (that claim's run ends with the failed
# append, so its one open ModelCalled is the call the reply answers). No provider's tool
# call id holds a space, so it never answers a tool. Here, not in the runner: `noeta show`
# names it without importing the runner.
KEPT_REPLY_PREFIX = "noeta model reply, epoch "


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
