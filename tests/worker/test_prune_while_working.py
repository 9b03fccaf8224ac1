"""Pruning online: a real worker keeps claiming and finishing tasks while `prune_finished`
removes thousands of finished ones batch by batch; every row of a pruned task is gone,
and a live task in the same queue is untouched."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import psycopg

from noeta.client import AsyncClient, Submission
from noeta.core.ports.retention import PruneCounts, Pruning
from noeta.core.ports.store import Delivery, NewEvent, Snapshot, Store, Wait
from noeta.testing.store_contract.bulk import bulk
from noeta.testing.store_contract.fixtures import LEASE, created
from noeta.testing.store_contract.retention import finish
from tests.worker.conftest import WorkerProcess, until

OLD = 1500
TABLES = ("events", "inbox", "snapshots", "late_results", "cron_fires", "tasks")


async def rows_of(url: str, prefix: str) -> dict[str, int]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
        counts = {}
        for table in TABLES:
            column = "id" if table == "tasks" else "task_id"
            found = await connection.execute(
                f"SELECT count(*) FROM {table} WHERE starts_with({column}, %s)",
                (prefix,),
            )
            counts[table] = (await found.fetchone() or (0,))[0]
        return counts


async def test_workers_keep_claiming_while_finished_tasks_are_pruned(
    store: Store, postgres_url: str, workers: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    # Old finished tasks, each with a log, a delivery and a snapshot.
    await bulk(store).create_tasks([created(f"old-{n}", queue="old") for n in range(OLD)])
    await asyncio.gather(*(finish(store, f"old-{n}") for n in range(OLD)))
    for n in range(0, OLD, 100):
        await store.deliver(Delivery(f"old-{n}", {"text": "late"}, "m"))
        await store.put_snapshot(Snapshot(f"old-{n}", "v1", 2, b"state"))
    # A live task in the same queue: waiting, with something in its inbox.
    await store.create_task(created("live-1", queue="old"))
    claim = await store.claim_task("w", "live-1", LEASE)
    assert claim is not None
    await store.append(claim, 1, [NewEvent("waited", {})], next_state=Wait())
    await store.deliver(Delivery("live-1", {"text": "hi"}, "x"))
    live_before = await rows_of(postgres_url, "live-")

    model = tmp_path / "model.yaml"
    model.write_text(json.dumps({"replies": [{"text": "ok"}]}))
    async with AsyncClient(postgres_url) as client:
        work = await client.submit_many(
            [Submission(f"job {n}", tools=[]) for n in range(300)],
            model=f"scripted:{model}",
            queue="work",
        )
        workers(postgres_url, "w1", queues="work", poll=0.1, concurrency=4)

        async def some_work_done() -> bool:
            return bool(await client.tasks(status="done", queue="work", limit=1))

        await until(some_work_done, "the worker finishes a first task", 60)
        started = await store.clock()
        assert isinstance(store, Pruning)
        counts = await store.prune_finished(timedelta(0), queue="old", batch_size=10)
        ended = await store.clock()
        for handle in work:
            assert await client.result(handle, timeout=120) == "ok"

    assert counts == PruneCounts(tasks=OLD, events=2 * OLD)
    assert await rows_of(postgres_url, "old-") == dict.fromkeys(TABLES, 0)
    assert await rows_of(postgres_url, "live-") == live_before
    # The worker went on finishing tasks while the batches ran (no long lock stopped it).
    finished = await store.list_tasks(queue="work", limit=1000)
    during = [record for record in finished if started < record.updated_at < ended]
    assert during, "no task finished while the prune ran"
