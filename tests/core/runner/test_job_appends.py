"""A job's result and its task's finish land in one append (ADR-0055), on sqlite and
PostgreSQL, whether the call ran or a crash left it to recovery; ToolStarted still lands
alone, before the call."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from noeta.backends.models.registry import ProviderRegistry
from noeta.backends.stores import open_store
from noeta.core.ports.store import Claim, NewEvent, NewTask, Store
from noeta.core.ports.tool import OUTCOME_UNKNOWN
from noeta.core.rules import events
from noeta.core.runner.task import TaskRunner
from tests.core.runner.test_runner import LEASE, Echo

CALL = events.CallRequested("job", "Echo", {"text": "hi"})


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    store = await open_store(store_url, migrate=True)
    yield store
    await store.close()


def appends_of(store: Store) -> list[list[str]]:
    """Records the event types of each append the store takes from here on (the real
    store's append still does the work)."""
    appends: list[list[str]] = []
    real = store.append

    async def append(claim: Claim, expected_seq: int, new: Sequence[NewEvent], **kw: Any) -> int:
        appends.append([event.type for event in new])
        return await real(claim, expected_seq, new, **kw)

    store.append = append  # type: ignore[method-assign,assignment]
    return appends


async def run_job(store: Store, echo: Echo, *earlier: events.Event) -> list[list[str]]:
    """Runs job-1 (its log: TaskCreated, CallRequested, then `earlier`: what a claim
    that died got to); the event types of each append the run made."""
    created = events.TaskCreated(model="", tools=("Echo",))
    log = [NewEvent(*events.encode(event)) for event in (created, CALL, *earlier)]
    assert await store.create_task(NewTask("job-1", log))
    claim = await store.claim_task("worker-1", "job-1", LEASE)
    assert claim is not None
    appends = appends_of(store)
    result = await TaskRunner(store, ProviderRegistry(), {"Echo": echo}).run(claim)
    assert result.state.finished
    return appends


async def test_a_job_ends_with_its_result_and_finish_in_one_append(store: Store) -> None:
    echo = Echo()
    appends = await run_job(store, echo)
    assert echo.runs == ["job-1:job"]
    assert appends == [["ToolStarted"], ["ToolFinished", "TaskFinished"]]
    task = await store.get_task("job-1")
    assert task is not None and task.status.value == "done"


async def test_a_recovered_job_ends_with_its_outcome_in_one_append(store: Store) -> None:
    echo = Echo()  # neither retry_safe nor recoverable: its outcome is unknown
    appends = await run_job(store, echo, events.ToolStarted("job", "Echo", {"text": "hi"}))
    assert echo.runs == []
    assert appends == [["ToolFinished", "TaskFinished"]]
    log = await store.read_log("job-1")
    assert log[-1].data["error"] == OUTCOME_UNKNOWN  # type: ignore[index,call-overload]
