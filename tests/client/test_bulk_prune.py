"""Pruning and retrying a group of failures in bulk (issue 31 item 4, issue 33 item 2): the
filters of a failure group (job name, error kind, queue) select exactly its tasks; a dry
run counts; a prune takes them whole in batches, and a second run finds nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from noeta.backends.stores import open_store
from noeta.client import AsyncClient
from noeta.core.errors import ConfigError
from noeta.core.ports.store import Store, TaskStatus
from tests.client.test_bulk_retry import ended_jobs


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[Store]:
    store = await open_store(postgres_url, migrate=True)
    yield store
    await store.close()


async def test_a_failure_group_is_retried_and_pruned_by_its_filters(
    store: Store, postgres_url: str
) -> None:
    group = await ended_jobs(store, postgres_url, 12, TaskStatus.FAILED, queue="mail")
    elsewhere = await ended_jobs(store, postgres_url, 3, TaskStatus.FAILED, queue="other")
    async with AsyncClient(postgres_url) as client:
        chosen = {"status": "failed", "queue": "mail", "job": "send_email"}
        wrong_kind = await client.retry_many(**chosen, error_kind="ValueError", dry_run=True)
        assert wrong_kind.matched == 0
        counted = await client.retry_many(**chosen, error_kind="RuntimeError", dry_run=True)
        assert counted.matched == 12

        dry = await client.prune_many(**chosen, error_kind="RuntimeError", dry_run=True)
        assert (dry.matched, dry.done) == (12, 0)
        seen: list[int] = []
        pruned = await client.prune_many(
            **chosen,
            error_kind="RuntimeError",
            batch_size=5,
            progress=lambda o: seen.append(o.done),
        )
        assert (pruned.matched, pruned.done, pruned.skipped, seen) == (12, 12, 0, [5, 10, 12])
        again = await client.prune_many(**chosen, error_kind="RuntimeError")
        assert (again.matched, again.done) == (0, 0)

        # A task whose retry is live goes too (ADR-0113): "retry all" then "discard all"
        # leaves the retries, not their sources.
        retried = await client.retry(elsewhere[0])
        gone = await client.prune_many(status="failed", queue="other", error_kind="RuntimeError")
        assert (gone.matched, gone.done, gone.skipped) == (3, 3, 0)
        with pytest.raises(ConfigError, match="a ready task cannot be pruned"):
            await client.prune_many(status="ready")
    for task_id in group + elsewhere:
        assert await store.get_task(task_id) is None
    assert await store.get_task(retried.id) is not None
