"""A job started by its claim (issue 28, ADR-0101): its ToolStarted is durable with the
claim, before the call runs. A worker SIGKILLed right after that claim's commit leaves a
started call, which the next worker settles as any crash after ToolStarted: a retry-safe
job runs (once), any other ends "outcome unknown" and never runs. Real worker processes."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from noeta.backends.stores import open_store
from noeta.client import AsyncClient
from noeta.core.errors import TaskFailed
from noeta.core.ports.tool import OUTCOME_UNKNOWN
from tests.client import jobs_for_tests
from tests.client.test_job_recovery import LONG_LEASE, lines, recoveries
from tests.worker.conftest import WorkerProcess, lapse_the_lease, until

assert jobs_for_tests  # imported: its decorated functions are what enqueue can name

KILLED_AFTER_CLAIM = "claim.after_commit=kill"


def ran(ledger: Path) -> list[str]:
    return lines(ledger) if ledger.exists() else []


async def killed_after_the_claim(
    client: AsyncClient,
    url: str,
    job_workers: Callable[..., WorkerProcess],
    job: str,
    **input: object,
) -> str:
    handle = await client.enqueue(job, input, id=f"{job}-1")
    first = job_workers(url, "first", lease=LONG_LEASE, failpoints=KILLED_AFTER_CLAIM)
    assert await first.exit_code() == -signal.SIGKILL
    store = await open_store(url)
    try:
        log = await store.read_log(handle.id)
    finally:
        await store.close()
    # The claim wrote the start, under its own epoch; nothing ran.
    assert log[-1].type == "ToolStarted" and log[-1].epoch == 1 and log[-1].owner == "first"
    assert await lapse_the_lease(url, handle.id) == 1
    job_workers(url, "second", lease=LONG_LEASE)
    return handle.id


async def test_a_job_not_safe_to_repeat_never_runs_after_a_kill_past_its_claim(
    client: AsyncClient, postgres_url: str, job_workers: Callable[..., WorkerProcess], ledger: Path
) -> None:
    task = await killed_after_the_claim(
        client, postgres_url, job_workers, "send_email", to="ada@example.com"
    )
    with pytest.raises(TaskFailed) as failed:
        await client.result(task, timeout=60)
    assert failed.value.error == OUTCOME_UNKNOWN
    assert ran(ledger) == []  # its claim started it; it never ran
    assert await recoveries(client, task) == ["unknown"]


async def test_a_retry_safe_job_runs_once_after_a_kill_past_its_claim(
    client: AsyncClient, postgres_url: str, job_workers: Callable[..., WorkerProcess], ledger: Path
) -> None:
    task = await killed_after_the_claim(
        client, postgres_url, job_workers, "resize", image="a.png", width=64
    )
    assert await client.job_result(task, timeout=60) == {"image": "a.png", "width": 64}
    assert lines(ledger) == ["resize resize-1:job"]
    assert await recoveries(client, task) == ["rerun"]


async def test_a_job_its_lost_claim_started_runs_once_on_adoption(
    client: AsyncClient, postgres_url: str, job_workers: Callable[..., WorkerProcess], ledger: Path
) -> None:
    """The claim committed and started the job, its reply was lost: the worker adopts the
    job and runs it, once. It never ran anywhere, so it is not a crashed call: settling
    it as one ended a job not safe to repeat "outcome unknown", for a dropped reply."""
    handle = await client.enqueue("send_email", {"to": "ada@example.com"}, id="send_email-1")
    worker = job_workers(
        postgres_url, "w", lease=LONG_LEASE, failpoints="claim.after_commit=raise(CommitUnknown)@1"
    )
    assert await client.job_result(handle.id, timeout=60) == "sent to ada@example.com"
    assert ran(ledger) == ["email send_email-1:job ada@example.com"]
    assert "unknown" not in await recoveries(client, handle.id)
    assert "adopted task send_email-1" in worker.log()


async def test_a_job_this_worker_ran_is_not_run_again_when_adopted(
    client: AsyncClient, postgres_url: str, job_workers: Callable[..., WorkerProcess], ledger: Path
) -> None:
    """The worker ran the job; its finish's commit was lost (the claim may still be its
    own), and its next claim's reply too: it adopts what the store records as its own,
    this job among them. Its log still ends with the ToolStarted this worker's claim
    wrote, but the job ran here: adopted, it is settled as a crashed call (its result,
    kept, recorded), not called again (make cluster, seed 118175: a plain job's marker
    recorded twice)."""
    handle = await client.enqueue("send_email", {"to": "ada@example.com"}, id="send_email-1")
    worker = job_workers(
        postgres_url,
        "w",
        lease=LONG_LEASE,
        failpoints="append.before_commit=raise(CommitUnknown)@1;"
        "claim.after_commit=raise(CommitUnknown)@2",
    )

    async def its_claim_lost() -> bool:
        return "send_email-1: claim lost" in worker.log()

    await until(its_claim_lost, "the job's finish lost")
    await client.enqueue("resize", {"image": "a.png", "width": 64}, id="resize-1")  # a claim
    # Its result, kept for the next claimer, is recorded by the adopted run.
    assert await client.job_result(handle.id, timeout=60) == "sent to ada@example.com"
    emails = [line for line in ran(ledger) if line.startswith("email")]
    assert emails == ["email send_email-1:job ada@example.com"]  # once
    assert "adopted task send_email-1" in worker.log()
