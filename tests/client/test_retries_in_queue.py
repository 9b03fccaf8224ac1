"""A job's retries wait in the queue, not in its worker's slot, and its `max_attempts`
holds across a crash (issue 29 item 6): real worker processes, a ledger of attempts."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from noeta.client import AsyncClient
from noeta.core.errors import TaskCancelled, TaskFailed
from noeta.core.ports.store import TaskStatus
from noeta.core.ports.tool import OUTCOME_UNKNOWN
from noeta.core.rules import events
from tests.client import jobs_for_tests
from tests.worker.conftest import WorkerProcess, lapse_the_lease

assert jobs_for_tests  # imported: its decorated functions are what enqueue can name

LONG_LEASE = 600  # never lapses during a test: the test lapses it

# What an operator does to run a waiting retry now: its wait ends at once.
_BRING_FORWARD = """
UPDATE tasks SET ready_at = now(), claimable_at = now()
 WHERE id = %s AND status = 'waiting'
"""


async def bring_forward(url: str, task_id: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
        changed = await admin.execute(_BRING_FORWARD, (task_id,))
    assert changed.rowcount == 1, f"task {task_id} is not waiting"


async def next_failed_attempt(client: AsyncClient, task_id: str, seen: int) -> events.AttemptFailed:
    """The log's AttemptFailed after the `seen` first ones, once it has landed."""
    async for tailed in client.tail(task_id):
        if isinstance(tailed.event, events.AttemptFailed):
            if seen == 0:
                return tailed.event
            seen -= 1
    raise AssertionError(f"task {task_id} finished without another failed attempt")


async def logged(client: AsyncClient, task_id: str) -> list[events.Event]:
    return [tailed.event async for tailed in client.tail(task_id, follow=False)]


async def test_a_retry_waits_in_the_queue_and_frees_the_slot(
    client: AsyncClient, postgres_url: str, job_workers: Callable[..., WorkerProcess], ledger: Path
) -> None:
    task = (await client.enqueue("refused_twice")).id
    job_workers(postgres_url, "w", concurrency=1, poll=0.1, lease=LONG_LEASE)
    first = await next_failed_attempt(client, task, 0)
    assert (first.attempt, first.error) == (1, "ConnectionError: attempt 1 refused")
    waiting = await client.get(task)
    assert waiting.status is TaskStatus.WAITING and waiting.lease_until is None  # no claim
    assert waiting.ready_at == datetime.fromisoformat(first.retry_at)  # an hour ahead
    assert waiting.ready_at > waiting.updated_at

    # The one slot is free while the retry waits: another job runs to its end meanwhile.
    other = await client.enqueue("resize", {"image": "a.png", "width": 8})
    assert await client.job_result(other, timeout=60) == {"image": "a.png", "width": 8}
    assert (await client.get(task)).status is TaskStatus.WAITING

    await bring_forward(postgres_url, task)
    second = await next_failed_attempt(client, task, 1)
    assert (second.attempt, second.error) == (2, "ConnectionError: attempt 2 refused")
    await bring_forward(postgres_url, task)
    assert await client.job_result(task, timeout=60) == 3

    log = await logged(client, task)
    assert sum(isinstance(event, events.ToolStarted) for event in log) == 3
    failed = [event for event in log if isinstance(event, events.AttemptFailed)]
    assert [(f.attempt, f.error) for f in failed] == [
        (1, "ConnectionError: attempt 1 refused"),
        (2, "ConnectionError: attempt 2 refused"),
    ]
    assert all(f.seconds >= 0 and f.retry_at for f in failed)
    lines = (await asyncio.to_thread(ledger.read_text)).splitlines()
    assert (
        lines == [f"refused_twice {task}", f"resize {other.id}:job"] + [f"refused_twice {task}"] * 2
    )


async def test_an_attempt_cut_by_a_crash_counts_towards_max_attempts(
    client: AsyncClient, postgres_url: str, job_workers: Callable[..., WorkerProcess], ledger: Path
) -> None:
    # max_attempts=2, retry-safe: the first attempt is refused, the second kills its
    # worker mid-run. The next worker counts both from the log and runs no third.
    task = (await client.enqueue("refused_then_dies", id="dies-1")).id
    first = job_workers(postgres_url, "first", die=True, lease=LONG_LEASE)
    assert await first.exit_code() == -signal.SIGKILL
    assert await lapse_the_lease(postgres_url, task) >= 1
    job_workers(postgres_url, "second", lease=LONG_LEASE)
    with pytest.raises(TaskFailed) as failed:
        await client.result(task, timeout=60)
    assert failed.value.error == OUTCOME_UNKNOWN
    assert (await asyncio.to_thread(ledger.read_text)).splitlines() == [
        f"refused_then_dies {task}"
    ] * 2
    log = await logged(client, task)
    assert sum(isinstance(event, events.ToolStarted) for event in log) == 2


async def test_countdown_and_eta_put_the_start_ahead(client: AsyncClient) -> None:
    clock = await (await client.store()).clock()
    later = await client.enqueue("send_email", {"to": "a"}, countdown=3600)
    planned = await client.enqueue("send_email", {"to": "b"}, eta=clock + timedelta(days=1))
    batch = await client.enqueue_many("send_email", [{"to": "c"}], countdown=60)
    assert (await client.get(later)).ready_at >= clock + timedelta(seconds=3600)
    assert (await client.get(planned)).ready_at == clock + timedelta(days=1)
    assert (await client.get(batch[0])).ready_at >= clock + timedelta(seconds=60)


async def test_a_cancel_wakes_a_job_waiting_for_its_retry(
    client: AsyncClient, postgres_url: str, job_workers: Callable[..., WorkerProcess], ledger: Path
) -> None:
    task = (await client.enqueue("refused_twice")).id
    job_workers(postgres_url, "w", poll=0.1, lease=LONG_LEASE)
    await next_failed_attempt(client, task, 0)  # its retry is an hour away
    assert await client.cancel(task)
    with pytest.raises(TaskCancelled):
        await client.result(task, timeout=60)
    assert (await asyncio.to_thread(ledger.read_text)).splitlines() == [f"refused_twice {task}"]


async def test_a_job_in_its_own_process_knows_its_attempt(
    client: AsyncClient, postgres_url: str, job_workers: Callable[..., WorkerProcess]
) -> None:
    task = await client.enqueue("tells_its_attempt")
    job_workers(postgres_url, "w", poll=0.1, lease=LONG_LEASE)
    assert await client.job_result(task, timeout=60) == 1
