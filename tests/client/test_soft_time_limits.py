"""`soft_time_limit` (issue 29 item 3): `noeta.SoftTimeLimitExceeded` is raised inside
the function first, so it can clean up; the hard `time_limit` still stops it for real.
A sync function gets it in its own process, an async one in its task. A real worker for
the sync case; the async ones run through the tool in this process. The limits are far
apart (0.2 s against 600 s): the soft one always comes first, however loaded the machine."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

import pytest

import noeta
from noeta.client import AsyncClient
from noeta.core.ports.tool import ToolContext, ToolError
from noeta.plugins.function_tools import FunctionTool
from tests.client import jobs_for_tests
from tests.worker.conftest import WorkerProcess

CTX = ToolContext(task_id="t", call_id="c")


@pytest.mark.parametrize(
    ("limits", "said"),
    [
        ({"soft_time_limit": 5, "time_limit": 5}, "soft_time_limit must be below time_limit"),
        ({"soft_time_limit": 9, "time_limit": 5}, "soft_time_limit must be below time_limit"),
        ({"soft_time_limit": 0}, "soft_time_limit must be positive"),
        ({"soft_time_limit": -1, "time_limit": 5}, "soft_time_limit must be positive"),
        ({"soft_time_limit": float("nan")}, "soft_time_limit must be positive"),
        ({"time_limit": float("nan")}, "time_limit must be positive"),
    ],
)
def test_limits_that_cannot_hold_are_refused_when_decorating(
    limits: dict[str, float], said: str
) -> None:
    with pytest.raises(ValueError, match=said):

        @noeta.tool(**limits)  # type: ignore[call-overload]
        def job() -> None: ...


async def test_a_sync_job_catches_its_soft_limit_and_cleans_up(
    client: AsyncClient, postgres_url: str, job_workers: Callable[..., WorkerProcess], ledger: Path
) -> None:
    task = (await client.enqueue("cleans_up_at_its_soft_limit")).id
    worker = job_workers(postgres_url, "w", lease=600)
    assert await client.job_result(task, timeout=120) == "cleaned up"
    started, cleaned = (await asyncio.to_thread(ledger.read_text)).splitlines()
    assert started.split()[1] != str(worker.process.pid)  # in a process of its own
    assert cleaned == "cleaned up"


async def test_a_soft_limit_not_caught_fails_the_run_saying_so(
    ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NOETA_TEST_LEDGER", str(ledger))
    with pytest.raises(ToolError) as failed:
        await jobs_for_tests.ignores_its_soft_limit_cleanup.run({}, CTX)  # type: ignore[attr-defined]
    assert str(failed.value) == (
        "ignores_its_soft_limit_cleanup failed after 1 attempt(s):"
        " SoftTimeLimitExceeded: ran past its soft time limit of 0.2s"
    )


async def test_a_soft_limit_alone_runs_a_sync_function_in_its_own_process() -> None:
    tool = jobs_for_tests.has_only_a_soft_limit
    assert isinstance(tool, FunctionTool) and not tool.flags.runs_in_a_thread
    output = await tool.run({}, CTX)
    assert output.content.startswith('"stopped softly in ')
    assert output.content != f'"stopped softly in {os.getpid()}"'


@noeta.tool(soft_time_limit=0.2, time_limit=600)
async def async_cleans_up() -> str:
    try:
        await asyncio.Event().wait()
    except noeta.SoftTimeLimitExceeded:
        await asyncio.sleep(0)  # its cleanup may await: the task is not cancelled
        return "cleaned up"
    return "woken"


@noeta.tool(soft_time_limit=0.2, time_limit=1)
async def async_ignores_its_soft_limit() -> None:
    while True:
        try:
            await asyncio.Event().wait()
        except noeta.SoftTimeLimitExceeded:
            continue  # the hard limit is what stops it then


async def test_an_async_function_gets_the_exception_in_its_task() -> None:
    output = await async_cleans_up.run({}, CTX)  # type: ignore[attr-defined]
    assert output.content == '"cleaned up"'


async def test_an_async_function_ignoring_its_soft_limit_is_stopped_at_the_hard_one() -> None:
    with pytest.raises(ToolError, match="ran past its time limit of 1s"):
        await async_ignores_its_soft_limit.run({}, CTX)  # type: ignore[attr-defined]


async def test_a_cancel_during_the_soft_limits_cleanup_still_cancels() -> None:
    started = asyncio.Event()

    @noeta.tool(soft_time_limit=0.2, time_limit=600)
    async def cleans_up_slowly() -> None:
        try:
            await asyncio.Event().wait()
        except noeta.SoftTimeLimitExceeded:
            started.set()
            await asyncio.Event().wait()  # a cleanup that a cancel must still reach

    running = asyncio.ensure_future(cleans_up_slowly.run({}, CTX))  # type: ignore[attr-defined]
    await started.wait()
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running


@noeta.tool(soft_time_limit=0.2)
async def async_with_only_a_soft_limit() -> str:
    try:
        await asyncio.Event().wait()
    except noeta.SoftTimeLimitExceeded:
        return "cleaned up"
    return "woken"


async def test_a_soft_limit_alone_reaches_an_async_function_in_the_callers_task() -> None:
    # No hard limit: the call runs in the caller's own task (no wait_for task between),
    # whose cancellation count must come back to what it was.
    task = asyncio.current_task()
    assert task is not None
    output = await async_with_only_a_soft_limit.run({}, CTX)  # type: ignore[attr-defined]
    assert output.content == '"cleaned up"'
    assert task.cancelling() == 0
