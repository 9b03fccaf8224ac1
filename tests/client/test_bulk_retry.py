"""`noeta retry --status …` and `Client.retry_many` (issue 30 item 1): a dry run counts, a
real run retries in batches with progress, and a run cut by SIGKILL or SIGINT, run again,
or two runs at once, make exactly one retry a task (ADR-0098). Real `noeta` processes on
PostgreSQL; the failed tasks are jobs ended through the store's own fenced appends."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Literal

import pytest

from noeta.backends.stores import open_store
from noeta.client import AsyncClient
from noeta.core.ports.store import (
    ClaimedTask,
    Finish,
    NewEvent,
    Store,
    TaskRecord,
    TaskStatus,
)
from noeta.core.ports.store_views import TaskCursor
from noeta.core.rules import events
from tests.cli.test_run import noeta, one_line_error
from tests.client import jobs_for_tests
from tests.worker.conftest import until

assert jobs_for_tests  # imported: its decorated functions are what enqueue can name

FINISHER = "test-finisher"
ENDED_AT_ONCE = 8  # appends in flight at once, under the store's pool


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[Store]:
    store = await open_store(postgres_url, migrate=True)
    yield store
    await store.close()


async def ended_jobs(
    store: Store, url: str, count: int, status: TaskStatus, queue: str = "default"
) -> list[str]:
    """`count` jobs enqueued in `queue` and ended `status` (failed or cancelled) by a claim
    and a finishing append each, as a worker ends them."""
    async with AsyncClient(url) as client:
        inputs = [{"to": f"user{n}@example.com"} for n in range(count)]
        ids = [handle.id for handle in await client.enqueue_many("send_email", inputs, queue=queue)]
    ended: Literal["failed", "cancelled"] = "failed" if status is TaskStatus.FAILED else "cancelled"
    finish = events.TaskFinished(ended, error="RuntimeError: the mail server is down")
    ending = [NewEvent(*events.encode(finish))]
    left = count
    while left:
        claimed = await store.claim_and_load(
            FINISHER, [queue], 60, limit=min(left, 1000), snapshot_version="test"
        )
        assert claimed, "every enqueued job is claimable"
        for start in range(0, len(claimed), ENDED_AT_ONCE):
            await asyncio.gather(
                *(end(store, each, ending, status) for each in claimed[start:][:ENDED_AT_ONCE])
            )
        left -= len(claimed)
    return ids


async def end(store: Store, each: ClaimedTask, ending: list[NewEvent], status: TaskStatus) -> None:
    log = each.loaded.events if each.loaded else await store.read_log(each.claim.task_id)
    await store.append(each.claim, log[-1].seq, ending, next_state=Finish(status))


async def every_task(store: Store) -> list[TaskRecord]:
    views = store.capabilities.views
    assert views is not None
    found: list[TaskRecord] = []
    before = None
    while page := await views.task_page(before=before, limit=1000):
        found += page
        before = TaskCursor(page[-1].created_at, page[-1].id)
    return found


async def assert_one_retry_each(
    store: Store, sources: Sequence[str], untouched: Sequence[str] = ()
) -> None:
    """Every source has exactly one task made for it, `<id>.retry-1`, and nothing else was
    made: the tasks are the sources, the `untouched` and the retries, no more."""
    tasks = await every_task(store)
    ids = {task.id for task in tasks}
    assert len(tasks) == len(ids)
    made = ids - set(sources) - set(untouched)
    assert made == {f"{source}.retry-1" for source in sources}, sorted(made)[:5]
    for source in (sources[0], sources[-1]):
        log = await store.read_log(f"{source}.retry-1")
        assert log[1].type == "CallRequested" and log[1].data["retry_of"] == source  # type: ignore[index,call-overload]


def bulk_retry(
    url: str, *arguments: str, pause_after_a_batch: bool = False
) -> subprocess.Popen[str]:
    """`noeta retry --status failed …`; with `pause_after_a_batch`, it stops itself
    (SIGSTOP) after its first batch and its progress line, until sent SIGCONT."""
    failpoints = {"NOETA_FAILPOINTS": "bulk.after_batch=pause@1"} if pause_after_a_batch else {}
    return subprocess.Popen(
        [sys.executable, "-m", "noeta", "retry", "--status", "failed", *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "NOETA_STORE": url, **failpoints},
    )


async def stopped(process: subprocess.Popen[str]) -> None:
    """Once `process` has stopped itself (its state in /proc is T)."""

    def state() -> str:
        with open(f"/proc/{process.pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]

    async def is_stopped() -> bool:
        return await asyncio.to_thread(state) == "T"

    await until(is_stopped, "the bulk retry stops after its first batch", within=120)


@pytest.mark.timeout(300)
async def test_a_dry_run_counts_and_a_run_retries_each_failed_task_once(
    store: Store, postgres_url: str
) -> None:
    failed = await ended_jobs(store, postgres_url, 1200, TaskStatus.FAILED)
    others = await ended_jobs(store, postgres_url, 30, TaskStatus.FAILED, queue="other")
    others += await ended_jobs(store, postgres_url, 20, TaskStatus.CANCELLED)

    dry = await asyncio.to_thread(
        noeta, "retry", "--status", "failed", "--queue", "default", "--dry-run", store=postgres_url
    )
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("1,200 failed tasks in queue default would be retried")
    assert failed[-1] in dry.stdout  # the newest first
    assert len(await every_task(store)) == 1250  # a dry run makes nothing

    none = await asyncio.to_thread(
        noeta, "retry", "--status", "failed", "--since", "0s", store=postgres_url
    )
    assert (none.returncode, none.stdout) == (0, "no failed task matches: nothing to retry\n")

    ran = await asyncio.to_thread(
        noeta,
        "retry",
        "--status",
        "failed",
        "--queue",
        "default",
        "--since",
        "1h",
        "--batch-size",
        "500",
        store=postgres_url,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stderr.splitlines() == [
        "retried 500 of 1,200",
        "retried 1,000 of 1,200",
        "retried 1,200 of 1,200",
    ]
    assert ran.stdout == "retried 1,200 of 1,200\n"
    again = await asyncio.to_thread(
        noeta, "retry", "--status", "failed", "--queue", "default", store=postgres_url
    )
    assert again.stdout == "retried 0 of 1,200; 1,200 skipped (retried already)\n", again.stderr
    await assert_one_retry_each(store, failed, untouched=others)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGINT])
async def test_a_run_cut_short_and_run_again_retries_each_task_once(
    store: Store, postgres_url: str, stop: signal.Signals
) -> None:
    failed = await ended_jobs(store, postgres_url, 2000, TaskStatus.FAILED)
    first = bulk_retry(postgres_url, "--batch-size", "100", pause_after_a_batch=True)
    assert first.stderr is not None
    line = await asyncio.to_thread(first.stderr.readline)  # its first batch has landed
    assert line.startswith("retried 100 of 2,000"), line
    await stopped(first)
    first.send_signal(stop)
    first.send_signal(signal.SIGCONT)  # a stopped process handles SIGINT once continued
    _, said = await asyncio.to_thread(first.communicate, timeout=120)
    if stop is signal.SIGINT:
        assert first.returncode == 130
        assert "run the same command again to go on (no task is retried twice)" in said
        assert "Traceback" not in said
    else:
        assert first.returncode == -signal.SIGKILL
    made = len(await every_task(store)) - 2000
    assert made == 100  # cut after its first batch, made whole
    second = await asyncio.to_thread(noeta, "retry", "--status", "failed", store=postgres_url)
    assert second.returncode == 0, second.stderr
    assert f"; {made:,} skipped (retried already)" in second.stdout
    await assert_one_retry_each(store, failed)


@pytest.mark.timeout(300)
async def test_two_runs_at_once_make_one_retry_a_task(store: Store, postgres_url: str) -> None:
    failed = await ended_jobs(store, postgres_url, 2000, TaskStatus.FAILED)
    # Both stop after their first batch (the second's: the same 100 tasks, found taken),
    # so that the rest is done by two live runs at once.
    runs = [bulk_retry(postgres_url, "--batch-size", "100", pause_after_a_batch=True)]
    await stopped(runs[0])
    runs.append(bulk_retry(postgres_url, "--batch-size", "100", pause_after_a_batch=True))
    await stopped(runs[1])
    for run in runs:
        run.send_signal(signal.SIGCONT)
    outputs = [await asyncio.to_thread(run.communicate, timeout=300) for run in runs]
    for run, (_, err) in zip(runs, outputs, strict=True):
        assert run.returncode == 0, err
    done = [int(out.split()[1].replace(",", "")) for out, _ in outputs]
    assert sum(done) == 2000  # between them, each task once
    await assert_one_retry_each(store, failed)


async def test_the_client_retries_and_cancels_in_bulk(store: Store, postgres_url: str) -> None:
    cancelled = await ended_jobs(store, postgres_url, 40, TaskStatus.CANCELLED, queue="q")
    async with AsyncClient(postgres_url) as client:
        counted = await client.retry_many(status="cancelled", dry_run=True)
        assert (counted.matched, counted.done, counted.sample) == (40, 0, cancelled[::-1][:5])
        seen: list[int] = []
        outcome = await client.retry_many(
            status="cancelled",
            since=timedelta(hours=1),
            limit=25,
            batch_size=10,
            progress=lambda so_far: seen.append(so_far.done),
        )
        assert (outcome.matched, outcome.done, seen) == (25, 25, [10, 20, 25])
        single = await client.retry(cancelled[0])  # the oldest: not among the newest 25
        assert single.id == f"{cancelled[0]}.retry-1"
        rest = await client.retry_many(status="cancelled", queue="q")
        assert (rest.done, rest.skipped) == (14, 26)  # the single retry counts as a retry
        ready = await client.cancel_many(status="ready", queue="q", dry_run=True)
        assert ready.matched == 40
        asked = await client.cancel_many(status="ready", queue="q", batch_size=15)
        assert (asked.matched, asked.done, asked.skipped) == (40, 40, 0)
        again = await client.cancel_many(status="ready", queue="q")
        assert (again.done, again.skipped) == (0, 40)  # asked already
    await assert_one_retry_each(store, cancelled)


def test_a_bulk_retry_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'noeta.db'}"
    refusals = {
        ("--status", "running"): "a running task cannot be retried: only failed or cancelled",
        ("--status", "ready"): "a ready task cannot be retried: only failed or cancelled",
        ("--status", "failed", "--since", "yesterday"): "'yesterday' is an unreadable duration",
        ("--status", "failed", "--since", "-1h"): "'-1h' is a negative duration",
        ("t1", "--dry-run"): "--dry-run selects tasks with --status; it does not go with a TASK_ID",
        ("t1", "--status", "failed"): "give a TASK_ID or --status, not both",
        ("--status", "failed", "--force"): "--force is for one TASK_ID, not --status",
        ("--status", "bogus"): "unknown status 'bogus'",
        (): "give a TASK_ID to retry, or --status failed (or cancelled)",
    }
    for arguments, message in refusals.items():
        refused = noeta("retry", *arguments, store=url)
        assert message in one_line_error(refused), arguments


async def test_a_bulk_retry_of_tasks_noeta_run_started_says_where_they_wait(
    store: Store, postgres_url: str
) -> None:
    await ended_jobs(store, postgres_url, 2, TaskStatus.FAILED, queue="noeta-run")
    ran = await asyncio.to_thread(noeta, "retry", "--status", "failed", store=postgres_url)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "retried 2 of 2\n"
    assert ran.stderr.splitlines()[-1] == (
        "noeta: retries of tasks `noeta run` started wait in noeta-run, which only "
        "`noeta worker --queues noeta-run` serves"
    )
