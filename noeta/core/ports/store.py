"""The task store port: the `Store` protocol (its values are in `noeta.core.ports.store_values`,
re-exported here with the errors it raises).

A task is a row plus an append-only log. The store guarantees one writer per task:
every `append` checks, in the same transaction as the write, that the claim's epoch is
still the task's and its lease is valid, and that the log ends at `expected_seq`.
Adapters live in `noeta/backends/stores/`; their shared test suite in
`noeta/testing/store_contract/`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Protocol

from noeta.core.errors import (
    CommitUnknown,
    Conflict,
    NoetaError,
    NotStarted,
    PayloadError,
    SchemaMismatch,
    StoreError,
    StoreUnavailable,
    UnknownTask,
)
from noeta.core.ports.store_capabilities import StoreCapabilities
from noeta.core.ports.store_values import (
    CANCEL_KEY,
    DEFAULT_PRIORITY,
    DEFAULT_QUEUE,
    MAX_CLAIM_BATCH,
    MAX_KEY_CHARS,
    Claim,
    ClaimedTask,
    ClaimKey,
    Continue,
    CronFire,
    CronFireRecord,
    Delivery,
    Finish,
    FireOutcome,
    InboxEntry,
    JobStarts,
    KnownLog,
    LateResult,
    LoadedTask,
    NewEvent,
    NewTask,
    NextState,
    Snapshot,
    StartedBy,
    StoredEvent,
    TaskRecord,
    TaskStatus,
    Wait,
    WaitHolding,
    check_append,
    check_claim_limit,
    check_cron_fire,
    check_key,
    check_late_result,
    check_lease,
    check_moment,
    cron_message_key,
)

__all__ = [
    "CANCEL_KEY",
    "DEFAULT_PRIORITY",
    "Claim",
    "ClaimKey",
    "ClaimedTask",
    "CommitUnknown",
    "Conflict",
    "Continue",
    "CronFire",
    "CronFireRecord",
    "DEFAULT_QUEUE",
    "Delivery",
    "Finish",
    "FireOutcome",
    "InboxEntry",
    "LateResult",
    "JobStarts",
    "KnownLog",
    "LoadedTask",
    "MAX_CLAIM_BATCH",
    "MAX_KEY_CHARS",
    "NewEvent",
    "NewTask",
    "NextState",
    "NoetaError",
    "NotStarted",
    "PayloadError",
    "SchemaMismatch",
    "Snapshot",
    "StartedBy",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "StoredEvent",
    "TaskRecord",
    "TaskStatus",
    "UnknownTask",
    "Wait",
    "WaitHolding",
    "check_append",
    "check_claim_limit",
    "check_cron_fire",
    "check_key",
    "check_late_result",
    "check_lease",
    "check_moment",
    "cron_message_key",
]


class Store(Protocol):
    """Durable tasks with one writer each. Every method is a single transaction.

    Raises `StoreUnavailable` when the store cannot be reached and `CommitUnknown` when a
    write's outcome is unknown; neither is ever retried inside the store.
    """

    @property
    def capabilities(self) -> StoreCapabilities:
        """The optional ports this store has beside these methods (ADR-0084)."""
        ...

    async def create_task(self, task: NewTask) -> bool:
        """Create the task and its first events; False if a task with that id exists."""
        ...

    async def claim(self, worker: str, queues: Sequence[str], lease_seconds: float) -> Claim | None:
        """Claim the claimable task that has been due longest, bumping its epoch."""
        ...

    async def claim_and_load(
        self,
        worker: str,
        queues: Sequence[str],
        lease_seconds: float,
        *,
        limit: int = 1,
        snapshot_version: str,
        excluding: Collection[str] = (),
        offers: Collection[str] | None = None,
        job_starts: JobStarts | None = None,
        only: Collection[str] | None = None,
        hold: bool = False,
        ahead: bool = False,
    ) -> list[ClaimedTask]:
        """Claim up to `limit` (1 to 1,000) of the claimable tasks due longest, each with
        its own epoch and lease, and read each as `load` would: in one round trip where
        the store can (ADR-0060). A task the store could not read with its claim comes
        with `loaded` None: the claimer loads it. Each queue is walked in its own due
        order: a backlog in one queue does not slow the claims of another. No task named
        in `excluding` is claimed (the claimer's own runs, whose leases may have lapsed
        while their renewal was held up: ADR-0079). `offers`: the plugin names the
        claimer has; a task that needs one it lacks is left for a worker that has it
        (None: it runs anything; ADR-0092). `job_starts`: the fresh plain jobs claimed are
        started by the claim's own commit, their `loaded.started_by_claim` set (ADR-0101).
        `only`: claim among these tasks alone, whatever is due before them, and none in a
        queue with settings (its limits are the due walk's): a worker continuing what its
        last run made claimable (ADR-0109). `hold`: an idle worker's claim for one agent
        task may stay uncommitted until its run's first write, which then commits both;
        such a task comes with `durable` set (ADR-0136). A store may ignore it. `ahead`:
        a busy worker's claim of its next tasks, which wait in it for a slot (ADR-0158):
        none in a queue with settings, whose limits would count a waiting task as running;
        a store may claim nothing."""
        ...

    async def seconds_until_due(self, queues: Sequence[str]) -> float | None:
        """How long until a task in `queues` becomes claimable by time (a lease lapsing,
        a timer); None if none will. An idle worker sleeps until then, not a whole poll."""
        ...

    async def queue_depth(self, queues: Sequence[str]) -> Mapping[str, int]:
        """How many tasks each of `queues` holds that a worker could claim now (for the
        queue-depth metric); a queue with none is missing. One index-only count."""
        ...

    async def claim_task(
        self,
        worker: str,
        task_id: str,
        lease_seconds: float,
        *,
        offers: Collection[str] | None = None,
    ) -> Claim | None:
        """Claim this task if it is claimable now and needs nothing `offers` lacks
        (`noeta run` runs its own task)."""
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
        deliver to other tasks, create tasks, and move the task to `next_state`. The
        tasks created are this task's subtasks: they carry its concurrency key and
        priority, whatever `new_tasks` say, so a tenant's limit holds through `Agent`.
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

    async def wait_for_late_result(
        self, task_id: str, call_id: str, seconds: float
    ) -> LateResult | None:
        """The late result kept for this call, waiting up to `seconds` (the worker's
        clock) for one to be kept; None if none was by then. PostgreSQL is woken by the
        keep's NOTIFY (noeta_late_result); sqlite polls (ADR-0083)."""
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

    async def cron_schedules(self) -> list[str]:
        """The names of every schedule a scheduler has registered (by `cron_marks`), sorted:
        what `cron history` can name."""
        ...

    async def close(self) -> None: ...
