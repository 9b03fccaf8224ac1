"""What a plain job costs its worker in store calls (issue 28, ADR-0101): a fresh job is one
claim (which starts it) and one append (its result and its finish). Counted, not timed;
both stores, the real runner and a real `@noeta.tool` function."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

import noeta
from noeta.backends.models.registry import ProviderRegistry
from noeta.backends.stores import open_store
from noeta.client.job_tasks import job_task
from noeta.core.ports.store import Store
from noeta.core.runner.task import TaskRunner
from noeta.plugins.loading import module_pin


@noeta.tool(retry_safe=True)
async def nothing() -> None:
    """Does nothing: what is counted is the store around it."""


class CountedStore:
    """The real store; the name of every store method the run awaits, in order."""

    def __init__(self, store: Store) -> None:
        self.inner, self.calls = store, list[str]()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.inner, name)
        if not callable(value) or name.startswith("_"):
            return value

        def counted(*args: Any, **options: Any) -> Awaitable[Any]:
            self.calls.append(name)
            result: Awaitable[Any] = value(*args, **options)
            return result

        return counted


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    opened = await open_store(store_url, migrate=True)
    yield opened
    await opened.close()


async def run_a_job(store: Store) -> tuple[list[str], list[str]]:
    """The store calls of one fresh job's claim and run, and the types of its log."""
    await store.create_task(job_task("j", nothing, {}, "q", None))
    counted = CountedStore(store)
    runner = TaskRunner(
        counted,  # type: ignore[arg-type]
        ProviderRegistry(),
        tools={nothing.name: nothing},
        pins=(module_pin(nothing.module),),
    )
    claim: Callable[..., Awaitable[Any]] = counted.claim_and_load
    [claimed] = await claim(
        "w", ["q"], 600, snapshot_version=runner.snapshot_version, job_starts=runner.job_starts
    )
    result = await runner.run(claimed.claim, claimed.loaded)
    assert result.state.finished == "done"
    return counted.calls, [event.type for event in await store.read_log("j")]


async def test_a_fresh_job_is_one_claim_and_one_append(store: Store) -> None:
    calls, log = await run_a_job(store)
    assert calls == ["claim_and_load", "append"]
    # The log as it always was (the golden logs' job): the start, then result and finish.
    assert log == [
        "TaskCreated",
        "CallRequested",
        "PluginsPinned",
        "ToolStarted",
        "ToolFinished",
        "TaskFinished",
    ]
