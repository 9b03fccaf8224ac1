"""What a store can do beside `Store`, said by the store itself: `Store.capabilities`.

Each optional port is a typed field, None where the store lacks it, so mypy checks every
use: a caller asks `store.capabilities.pruning` instead of probing with `isinstance` or
`getattr` (ADR-0084). A wrapping store (observed, journaled) says what it wraps itself.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

from noeta.core.ports.append_and_claim import AppendAndClaim
from noeta.core.ports.bulk import BulkCreate
from noeta.core.ports.idle_workers import AwaitFinish, IdleWorkers
from noeta.core.ports.model_limits import ModelLimiter
from noeta.core.ports.queue_settings import QueueSettingsStore
from noeta.core.ports.reply_streams import ReplyStreams
from noeta.core.ports.retention import Pruning
from noeta.core.ports.store_views import StoreViews
from noeta.core.ports.unique_jobs import UniqueJobs
from noeta.core.ports.worker_registry import WorkerRegistry

# Runs a burst of one task's store statements on one connection (PostgreSQL's pool).
Holding = Callable[[], AbstractAsyncContextManager[None]]
# Announcements as they come: a queue name or task id each, "*" when listening (re)starts;
# closing the generator closes its connection.
Notices = Callable[[], AsyncGenerator[str, None]]


@dataclass(frozen=True, slots=True)
class StoreCapabilities:
    """The optional ports of one store; None: it has not that one."""

    bulk: BulkCreate | None = None  # a batch of tasks in one transaction (ADR-0065)
    queue_settings: QueueSettingsStore | None = None  # queue limits (ADR-0073)
    views: StoreViews | None = None  # the web pages' reads
    pruning: Pruning | None = None  # removing finished tasks
    model_limits: ModelLimiter | None = None  # the model budgets' store
    holding: Holding | None = None  # a burst on one connection
    wakeups: Notices | None = None  # queues in which a task became claimable
    finishes: Notices | None = None  # tasks that just finished (awaited ones, if await_finish)
    idle_workers: IdleWorkers | None = None  # one woken worker per task (ADR-0087)
    await_finish: AwaitFinish | None = None  # a task's finish announced only once awaited
    workers: WorkerRegistry | None = None  # the live workers and what they offer (ADR-0092)
    unique_jobs: UniqueJobs | None = None  # jobs that hold a unique key (ADR-0093)
    reply_streams: ReplyStreams | None = None  # replies as they stream (ADR-0105)
    # An append and the claim of what it makes claimable, one commit (ADR-0121).
    append_and_claim: AppendAndClaim | None = None
