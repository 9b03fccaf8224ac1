"""The one seam where store calls become spans and metrics: a wrapper around any `Store`.

`observed(store)` is applied where the worker and `noeta run` open their store; with
tracing and metrics off it returns the store itself, so nothing is paid. Each call is a
child span of its task's innermost open span (`tracing.store_span`); claims,
takeovers, conflicts and commit-unknowns are counted here, for every backend at once.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from noeta.core.errors import CommitUnknown, Conflict
from noeta.core.ports.append_and_claim import ClaimAfter
from noeta.core.ports.model_limits import ModelBudget
from noeta.core.ports.store import (
    Claim,
    ClaimedTask,
    Continue,
    Delivery,
    InboxEntry,
    JobStarts,
    LateResult,
    LoadedTask,
    NewEvent,
    NewTask,
    NextState,
    Snapshot,
    Store,
    StoredEvent,
    TaskRecord,
    TaskStatus,
)
from noeta.core.ports.store_capabilities import StoreCapabilities
from noeta.observability import metrics, tracing


def observed(store: Store) -> Store:
    """`store`, observed if tracing or metrics are on."""
    if not (tracing.enabled() or metrics.enabled()):
        return store
    return ObservedStore(store)


@contextlib.contextmanager
def _observing(operation: str, task_id: str | None) -> Iterator[None]:
    try:
        with tracing.store_span(operation, task_id):
            yield
    except Conflict:
        metrics.conflict(operation)
        raise
    except CommitUnknown:
        metrics.commit_unknown(operation)
        raise


def _claimed(claim: Claim | None, started: int) -> Claim | None:
    if claim is not None:
        tracing.claimed(claim.task_id, started)
        metrics.claimed(claim.taken_over)
    return claim


class ObservedStore:
    """A `Store` that reports each call; everything else passes through (`wakeups`, …)."""

    def __init__(self, store: Store) -> None:
        self.inner = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @functools.cached_property  # asked per append and per model call
    def capabilities(self) -> StoreCapabilities:
        """The inner store's; its model-limited appends come here, to be observed."""
        inner = self.inner.capabilities
        if inner.model_limits is not None:
            inner = replace(inner, model_limits=self)
        if inner.append_and_claim is not None:
            inner = replace(inner, append_and_claim=self)
        return inner

    async def create_task(self, task: NewTask) -> bool:
        with _observing("create_task", None):
            return await self.inner.create_task(task)

    async def claim(self, worker: str, queues: Sequence[str], lease_seconds: float) -> Claim | None:
        started = time.time_ns()
        with _observing("claim", None):
            return _claimed(await self.inner.claim(worker, queues, lease_seconds), started)

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
        started = time.time_ns()
        with _observing("claim", None):
            claimed = await self.inner.claim_and_load(
                worker,
                queues,
                lease_seconds,
                limit=limit,
                snapshot_version=snapshot_version,
                excluding=excluding,
                offers=offers,
                job_starts=job_starts,
                only=only,
                hold=hold,
                ahead=ahead,
            )
        for each in claimed:
            _claimed(each.claim, started)
        return claimed

    async def seconds_until_due(self, queues: Sequence[str]) -> float | None:
        return await self.inner.seconds_until_due(queues)

    async def queue_depth(self, queues: Sequence[str]) -> Mapping[str, int]:
        return await self.inner.queue_depth(queues)

    async def claim_task(
        self,
        worker: str,
        task_id: str,
        lease_seconds: float,
        *,
        offers: Collection[str] | None = None,
    ) -> Claim | None:
        started = time.time_ns()
        with _observing("claim", None):
            claim = await self.inner.claim_task(worker, task_id, lease_seconds, offers=offers)
            return _claimed(claim, started)

    async def renew(self, claims: Sequence[Claim], lease_seconds: float) -> Mapping[str, Claim]:
        started = time.time_ns()
        with _observing("renew", None):
            renewed = await self.inner.renew(claims, lease_seconds)
        tracing.renewed(renewed, started, time.time_ns())
        return renewed

    async def release(self, claim: Claim) -> bool:
        with _observing("release", claim.task_id):
            return await self.inner.release(claim)

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
        with _observing("append", claim.task_id):
            return await self.inner.append(
                claim,
                expected_seq,
                events,
                take=take,
                deliveries=deliveries,
                new_tasks=new_tasks,
                next_state=next_state,
            )

    async def append_and_claim(
        self,
        claim: Claim,
        expected_seq: int,
        events: Sequence[NewEvent],
        *,
        deliveries: Sequence[Delivery] = (),
        next_state: NextState = Continue(),
        then: ClaimAfter,
    ) -> tuple[int, ClaimedTask | None]:
        with _observing("append", claim.task_id):
            joint = self.inner.capabilities.append_and_claim
            assert joint is not None  # `capabilities` offers this only then
            return await joint.append_and_claim(
                claim, expected_seq, events, deliveries=deliveries, next_state=next_state, then=then
            )

    async def append_model_called(
        self, claim: Claim, expected_seq: int, events: Sequence[NewEvent], budget: ModelBudget
    ) -> int:
        with _observing("append", claim.task_id):
            limiter = self.inner.capabilities.model_limits
            assert limiter is not None  # `capabilities` offers this only then
            return await limiter.append_model_called(claim, expected_seq, events, budget)

    async def deliver(self, delivery: Delivery) -> bool:
        with _observing("deliver", None):
            return await self.inner.deliver(delivery)

    async def keep_late_result(self, result: LateResult) -> bool:
        with _observing("keep_late_result", result.task_id):
            return await self.inner.keep_late_result(result)

    async def read_log(self, task_id: str, after_seq: int = 0) -> list[StoredEvent]:
        with _observing("read_log", task_id):
            return await self.inner.read_log(task_id, after_seq)

    async def load(self, task_id: str, snapshot_version: str) -> LoadedTask:
        with _observing("load", task_id):
            return await self.inner.load(task_id, snapshot_version)

    async def read_inbox(self, task_id: str, *, untaken_only: bool = True) -> list[InboxEntry]:
        with _observing("read_inbox", task_id):
            return await self.inner.read_inbox(task_id, untaken_only=untaken_only)

    async def get_task(self, task_id: str) -> TaskRecord | None:
        with _observing("get_task", task_id):
            return await self.inner.get_task(task_id)

    async def list_tasks(
        self, *, status: TaskStatus | None = None, queue: str | None = None, limit: int = 100
    ) -> list[TaskRecord]:
        return await self.inner.list_tasks(status=status, queue=queue, limit=limit)

    async def owned_by(self, worker: str) -> list[Claim]:
        with _observing("owned_by", None):
            return await self.inner.owned_by(worker)

    async def put_snapshot(self, snapshot: Snapshot) -> None:
        with _observing("put_snapshot", snapshot.task_id):
            await self.inner.put_snapshot(snapshot)

    async def get_snapshot(self, task_id: str, version: str) -> Snapshot | None:
        with _observing("get_snapshot", task_id):
            return await self.inner.get_snapshot(task_id, version)

    async def clock(self) -> datetime:
        return await self.inner.clock()

    async def close(self) -> None:
        await self.inner.close()
