"""Retrying, cancelling or pruning every task a filter selects (issue 30, issue 31): the
selection walked newest first a page at a time, each page one batch; a retry's id is its
source's (`<id>.retry-N`), so a run cut anywhere, or two at once, never retries a task
twice (ADR-0098); a pruned task is gone, so a prune run again goes on where it stopped."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from noeta.client import job_retry, messages
from noeta.client.creating import TaskExists, create_all_once
from noeta.core import failpoints
from noeta.core.errors import ConfigError, NoetaError, StoreError, UnknownTask
from noeta.core.ports.bulk import BulkCreate
from noeta.core.ports.retention import DEFAULT_BATCH_SIZE as PRUNE_BATCH
from noeta.core.ports.retention import REST_PER_BATCH
from noeta.core.ports.store import NewTask, Store, TaskRecord, TaskStatus
from noeta.core.ports.store_views import MAX_PAGE, NO_FILTER, StoreViews, TaskCursor, TaskFilter
from noeta.core.rules.task_id import retry_task_id

DEFAULT_BATCH = 500
SAMPLE_IDS = 5  # the ids a dry run shows, and the refusals an outcome keeps whole
READS_AT_ONCE = 8  # logs read at once while a batch is built: under the client's pool
RETRYABLE = job_retry.RETRYABLE
CANCELLABLE = tuple(status for status in TaskStatus if not status.finished)
PRUNABLE = tuple(status for status in TaskStatus if status.finished)


@dataclass(frozen=True, slots=True)
class Selection:
    """The tasks of one status, in `queue` (None: any), whose id or prompt holds `text`,
    that finished within `since` (for a finished status), that pass `where` (a job's
    name, an error kind, a creation time), the newest `limit` of them."""

    status: TaskStatus
    queue: str | None = None
    text: str | None = None
    since: timedelta | None = None
    limit: int | None = None
    where: TaskFilter = NO_FILTER


@dataclass(slots=True)
class BulkOutcome:
    """What a bulk retry or cancel did, or (a dry run) would do: `matched` tasks selected,
    `done` retried or asked to stop, `skipped` retried already (or finished, or asked to
    stop already), `refused` ones that cannot be (`refusals`: the first few, with why);
    `sample`: the first few ids selected (a dry run) or made (a retry); `queues`: those
    the retries made wait in."""

    matched: int = 0
    done: int = 0
    skipped: int = 0
    refused: int = 0
    refusals: list[tuple[str, str]] = field(default_factory=list)
    sample: list[str] = field(default_factory=list)
    queues: set[str] = field(default_factory=set)

    @property
    def walked(self) -> int:
        return self.done + self.skipped + self.refused

    def refuse(self, task_id: str, why: str) -> None:
        self.refused += 1
        if len(self.refusals) < SAMPLE_IDS:
            self.refusals.append((task_id, why))


Progress = Callable[[BulkOutcome], None]


def check_selection(selection: Selection, allowed: Sequence[TaskStatus], action: str) -> None:
    if selection.status not in allowed:
        named = " or ".join(status.value for status in allowed)
        raise ConfigError(
            f"a {selection.status.value} task cannot be {action}: only {named} ones can"
        )
    if selection.limit is not None and selection.limit < 1:
        raise ConfigError(f"limit must be at least 1, not {selection.limit}")
    if selection.since is not None and not selection.status.finished:
        raise ConfigError("since counts from a task's finish: only for a finished status")


def check_batch(batch_size: int) -> int:
    if isinstance(batch_size, bool) or not 1 <= batch_size <= MAX_PAGE:
        raise ConfigError(f"a batch is 1 to {MAX_PAGE} tasks, not {batch_size}")
    return batch_size


async def retry_many(
    store: Store,
    selection: Selection,
    *,
    dry_run: bool = False,
    batch_size: int = DEFAULT_BATCH,
    progress: Progress | None = None,
) -> BulkOutcome:
    """Retry every task `selection` picks (failed or cancelled), a batch at a time: each
    batch's retries are made in one transaction, and a task whose retry exists (made by an
    earlier run, a concurrent one, or `retry` without an id) is skipped."""
    check_selection(selection, RETRYABLE, "retried")
    bulk = store.capabilities.bulk
    if bulk is None:
        raise ConfigError(f"this store ({type(store).__name__}) cannot create in bulk")
    walk = await _Walk.start(store, selection, check_batch(batch_size))
    if dry_run:
        return await walk.counted()
    outcome = BulkOutcome(matched=walk.total)
    async for page in walk.pages():
        await _retry_batch(store, bulk, walk.views, page, outcome)
        if progress is not None:
            progress(outcome)
        await failpoints.hit("bulk.after_batch")
    return outcome


async def cancel_many(
    store: Store,
    selection: Selection,
    *,
    dry_run: bool = False,
    batch_size: int = DEFAULT_BATCH,
    progress: Progress | None = None,
) -> BulkOutcome:
    """Ask every task `selection` picks (not finished) to stop, a batch at a time."""
    check_selection(selection, CANCELLABLE, "cancelled")
    walk = await _Walk.start(store, selection, check_batch(batch_size))
    if dry_run:
        return await walk.counted()
    outcome = BulkOutcome(matched=walk.total)

    async def one(task_id: str) -> None:
        try:
            asked = await messages.cancel(_opened(store), task_id)
        except UnknownTask:  # pruned since the page was read
            asked = False
        except StoreError:
            raise  # the store failed: the run stops, and is run again to go on
        except NoetaError:  # it finished since the page was read
            asked = False
        if asked:
            outcome.done += 1
        else:
            outcome.skipped += 1

    async for page in walk.pages():
        await _bounded([one(record.id) for record in page])
        if progress is not None:
            progress(outcome)
        await failpoints.hit("bulk.after_batch")
    return outcome


async def prune_many(
    store: Store,
    selection: Selection,
    *,
    dry_run: bool = False,
    batch_size: int = PRUNE_BATCH,
    progress: Progress | None = None,
) -> BulkOutcome:
    """Prune every task `selection` picks (finished), a batch at a time, each batch one
    transaction of the store's prune (`Pruning.prune_tasks`), resting as long as it took
    as `prune_finished` does. A task that changed since the page was read (another prune
    took it, a live subtask keeps it) is skipped and counted."""
    check_selection(selection, PRUNABLE, "pruned")
    pruning = store.capabilities.pruning
    if pruning is None:
        raise ConfigError(f"this store ({type(store).__name__}) cannot prune")
    walk = await _Walk.start(store, selection, check_batch(batch_size))
    if dry_run:
        return await walk.counted()
    outcome = BulkOutcome(matched=walk.total)
    rest = 0.0
    async for page in walk.pages():
        await asyncio.sleep(rest)  # as long as the batch before took: claims keep pace
        started = time.monotonic()
        pruned = await pruning.prune_tasks([record.id for record in page])
        rest = (time.monotonic() - started) * REST_PER_BATCH
        outcome.done += pruned.tasks
        outcome.skipped += len(page) - pruned.tasks
        if progress is not None:
            progress(outcome)
        await failpoints.hit("bulk.after_batch")
    return outcome


async def _retry_batch(
    store: Store,
    bulk: BulkCreate,
    views: StoreViews,
    page: Sequence[TaskRecord],
    outcome: BulkOutcome,
) -> None:
    wanted = {retry_task_id(record.id): record for record in page}
    taken = await bulk.taken_ids(list(wanted))
    outcome.skipped += len(taken)
    # A job's creation, call and pin: its whole retry, read for the batch at once.
    openings = await views.log_openings([r.id for n, r in wanted.items() if n not in taken], 3)
    built: list[NewTask] = []

    async def build(new_id: str, record: TaskRecord) -> None:
        try:
            task = await job_retry.retried_task(
                store,
                record,
                new_id,
                opening=openings.get(record.id, []),
            )
        except StoreError:
            raise  # the store failed: the run stops, and is run again to go on
        except NoetaError as error:  # a log it cannot read, no step to run again from
            outcome.refuse(record.id, str(error))
        else:
            built.append(task)

    await _bounded([build(n, r) for n, r in wanted.items() if n not in taken])
    while built:
        try:
            await create_all_once(store, bulk, built, "retry")
        except TaskExists:
            # A concurrent run made some of them since the check: the key said so, and
            # nothing of this batch was written. Leave those out and send the rest.
            made = await bulk.taken_ids([task.id for task in built])
            if not made:
                raise
            outcome.skipped += len(made)
            built = [task for task in built if task.id not in made]
            continue
        outcome.done += len(built)
        outcome.queues.update(task.queue for task in built)
        outcome.sample.extend(task.id for task in built[: SAMPLE_IDS - len(outcome.sample)])
        return


class _Walk:
    """The selection's tasks newest first, in pages of the batch's size, up to its limit.
    Tasks made or finished after the walk starts are newer than its first page's cursor
    or outside its statuses, so a run never retries its own retries."""

    def __init__(
        self,
        views: StoreViews,
        selection: Selection,
        since: datetime | None,
        batch: int,
        total: int,
    ) -> None:
        self.views = views
        self.selection = selection
        self.since = since
        self.batch = batch
        self.total = total

    @classmethod
    async def start(cls, store: Store, selection: Selection, batch: int) -> _Walk:
        views = store.capabilities.views
        if views is None:
            raise ConfigError(f"this store ({type(store).__name__}) cannot list tasks by filter")
        since = None if selection.since is None else (await store.clock()) - selection.since
        total = await views.count_tasks(
            statuses=[selection.status],
            queue=selection.queue,
            text=selection.text,
            finished_since=since,
            cap=selection.limit,
            where=selection.where,
        )
        return cls(views, selection, since, batch, total)

    async def counted(self) -> BulkOutcome:
        first = await self._page(None, SAMPLE_IDS) if self.total else []
        return BulkOutcome(matched=self.total, sample=[record.id for record in first])

    async def pages(self) -> AsyncIterator[list[TaskRecord]]:
        left = self.selection.limit
        before: TaskCursor | None = None
        while left is None or left > 0:
            size = self.batch if left is None else min(self.batch, left)
            page = await self._page(before, size)
            if not page:
                return
            yield page
            if left is not None:
                left -= len(page)
            before = TaskCursor(page[-1].created_at, page[-1].id)

    async def _page(self, before: TaskCursor | None, size: int) -> list[TaskRecord]:
        return await self.views.task_page(
            statuses=[self.selection.status],
            queue=self.selection.queue,
            text=self.selection.text,
            before=before,
            limit=size,
            finished_since=self.since,
            where=self.selection.where,
        )


async def _bounded(work: Sequence[Awaitable[None]]) -> None:
    """Await `work`, READS_AT_ONCE at a time."""
    gate = asyncio.Semaphore(READS_AT_ONCE)

    async def one(item: Awaitable[None]) -> None:
        async with gate:
            await item

    await asyncio.gather(*(one(item) for item in work))


def _opened(store: Store) -> Callable[[], Awaitable[Store]]:
    async def opened() -> Store:
        return store

    return opened
