"""The client's retries and bulk actions (issue 30): one task run again, or every task a
filter selects retried, cancelled or pruned in batches; a part of `AsyncClient` (and
`Client`)."""

from __future__ import annotations

from datetime import datetime, timedelta

from noeta.client import bulk_actions, job_retry
from noeta.client.bulk_actions import BulkOutcome, Progress, Selection
from noeta.client.creating import TaskExists
from noeta.client.handles import TaskHandle
from noeta.client.submissions import new_id
from noeta.core.errors import ConfigError
from noeta.core.ports.retention import DEFAULT_BATCH_SIZE as PRUNE_BATCH
from noeta.core.ports.store import Store, TaskStatus, check_key
from noeta.core.ports.store_values import check_text
from noeta.core.ports.store_views import TaskFilter, checked_error_kind
from noeta.core.rules.task_id import retry_task_id


class RetryCalls:
    """What `AsyncClient` offers to run tasks again and act on many; it supplies `store()`."""

    async def store(self) -> Store:
        raise NotImplementedError

    async def retry(
        self,
        task: str | TaskHandle,
        *,
        id: str | None = None,
        key: str | None = None,
        priority: int | None = None,
        queue: str | None = None,
        force: bool = False,
    ) -> TaskHandle:
        """Run a failed or cancelled task again, as a new task: a job with its input (its
        log names `task`; its queue, key and priority unless given), an agent task forked
        at its last good step (in its queue unless given); with `force`, a done one too.
        Its id is `<task>.retry-1` (for a retry: the next number) unless that is taken
        (the task was retried before: then a new one) or `id` is given."""
        source = check_text("task id", task.id if isinstance(task, TaskHandle) else task)
        chosen = new_id(id) if id is not None else retry_task_id(source)
        try:
            return await job_retry.retry(
                self.store, source, chosen, key=key, priority=priority, queue=queue, force=force
            )
        except TaskExists:
            if id is not None:
                raise
        # Retried before: this is one more run of it, under an id of its own.
        return await job_retry.retry(
            self.store, source, new_id(None), key=key, priority=priority, queue=queue, force=force
        )

    async def retry_many(
        self,
        *,
        status: TaskStatus | str,
        queue: str | None = None,
        since: timedelta | None = None,
        text: str | None = None,
        limit: int | None = None,
        dry_run: bool = False,
        batch_size: int = bulk_actions.DEFAULT_BATCH,
        progress: Progress | None = None,
        job: str | None = None,
        error_kind: str | None = None,
        created_since: datetime | None = None,
    ) -> BulkOutcome:
        """Retry every `status` task (failed or cancelled), newest first: of `queue`, that
        finished within `since`, whose id or prompt holds `text`, jobs of function `job`,
        that ended with an `error_kind` error, created at or after `created_since`, at most
        `limit`. Each
        batch of `batch_size` is made in one transaction; a task retried already (by any
        run, or by `retry` without an id) is skipped, so a run cut anywhere can be run
        again, and two at once make one retry a task. `dry_run` counts and makes nothing.
        `progress` is called with the outcome so far after each batch."""
        selection = retry_selection(
            status, queue, since, text, limit, job, error_kind, created_since
        )
        return await bulk_actions.retry_many(
            await self.store(),
            selection,
            dry_run=dry_run,
            batch_size=batch_size,
            progress=progress,
        )

    async def cancel_many(
        self,
        *,
        status: TaskStatus | str,
        queue: str | None = None,
        text: str | None = None,
        limit: int | None = None,
        dry_run: bool = False,
        batch_size: int = bulk_actions.DEFAULT_BATCH,
        progress: Progress | None = None,
        job: str | None = None,
        created_since: datetime | None = None,
    ) -> BulkOutcome:
        """Ask every `status` task (not finished) to stop, as `cancel` does, in batches;
        the filters as `retry_many`'s."""
        selection = _selection(status, queue, None, text, limit, job, None, created_since)
        bulk_actions.check_selection(selection, bulk_actions.CANCELLABLE, "cancelled")
        return await bulk_actions.cancel_many(
            await self.store(),
            selection,
            dry_run=dry_run,
            batch_size=batch_size,
            progress=progress,
        )

    async def prune_many(
        self,
        *,
        status: TaskStatus | str,
        queue: str | None = None,
        since: timedelta | None = None,
        text: str | None = None,
        limit: int | None = None,
        dry_run: bool = False,
        batch_size: int = PRUNE_BATCH,
        progress: Progress | None = None,
        job: str | None = None,
        error_kind: str | None = None,
        created_since: datetime | None = None,
    ) -> BulkOutcome:
        """Prune every `status` task (done, failed or cancelled) the filters select (as
        `retry_many`'s), in batches of the store's prune: each task goes whole, its id
        stays taken (`noeta db prune`'s rules). A task that changed since it was read, or
        that a live subtask or parent keeps, is skipped and counted."""
        selection = _selection(status, queue, since, text, limit, job, error_kind, created_since)
        bulk_actions.check_selection(selection, bulk_actions.PRUNABLE, "pruned")
        return await bulk_actions.prune_many(
            await self.store(),
            selection,
            dry_run=dry_run,
            batch_size=batch_size,
            progress=progress,
        )


def retry_selection(
    status: TaskStatus | str,
    queue: str | None = None,
    since: timedelta | None = None,
    text: str | None = None,
    limit: int | None = None,
    job: str | None = None,
    error_kind: str | None = None,
    created_since: datetime | None = None,
) -> Selection:
    """The selection of a bulk retry, checked before any store is opened."""
    selection = _selection(status, queue, since, text, limit, job, error_kind, created_since)
    bulk_actions.check_selection(selection, bulk_actions.RETRYABLE, "retried")
    return selection


def _selection(
    status: TaskStatus | str,
    queue: str | None,
    since: timedelta | None,
    text: str | None,
    limit: int | None,
    job: str | None,
    error_kind: str | None,
    created_since: datetime | None,
) -> Selection:
    try:
        wanted = TaskStatus(status)
    except ValueError:
        known = ", ".join(each.value for each in TaskStatus)
        raise ConfigError(f"unknown status {status!r} (one of {known})") from None
    if queue is not None:
        check_key("queue name", queue)
    if since is not None and since < timedelta(0):
        raise ConfigError(f"since must not be negative, not {since}")
    if job is not None:
        check_key("job name", job)
    where = TaskFilter(job, checked_error_kind(error_kind), created_since)
    return Selection(
        wanted, queue, None if text is None else check_text("text", text), since, limit, where
    )
