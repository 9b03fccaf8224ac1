"""Late results in the runner, on both stores (ADR-040): a tool's result whose claim
was taken over while it ran is kept, and handed to the next claimer, or kept for the
operator when that claimer has settled the call already. The takeover happens inside the
tool, so the order of events is fixed by the test."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from noeta.backends.models.registry import ProviderRegistry
from noeta.backends.stores import open_store
from noeta.core.errors import Conflict
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.store import Claim, LateResult, Store
from noeta.core.ports.tool import OUTCOME_UNKNOWN, ToolContext, ToolFlags, ToolOutput
from noeta.core.runner.task import TaskRunner
from noeta.testing.store_contract import LEASE, eventually_claim, take_over

from .test_runner import create, script


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    store = await open_store(store_url, migrate=True)
    yield store
    await store.close()


@dataclass
class Charge:
    """A tool with a side effect; `meanwhile` runs while it runs (the takeover)."""

    meanwhile: Callable[[], Awaitable[None]]
    name: str = "Charge"
    description: str = "Charges a card."
    input_schema: dict[str, JSONValue] = field(default_factory=lambda: {"type": "object"})
    flags: ToolFlags = field(default_factory=ToolFlags)
    runs: list[str] = field(default_factory=list)

    async def run(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput:
        self.runs.append(ctx.idempotency_key)
        meanwhile, self.meanwhile = self.meanwhile, _nothing
        await meanwhile()
        return ToolOutput(f"charged, receipt {len(self.runs)}")


async def _nothing() -> None:
    return None


CALL = {"tool_calls": [{"id": "c1", "name": "Charge", "input": {}}]}


async def started(store: Store, tmp_path: Path) -> tuple[TaskRunner, Charge, Claim]:
    charge = Charge(_nothing)
    runner = TaskRunner(store, ProviderRegistry(), tools={"Charge": charge})
    await create(
        store, "t", script(tmp_path, CALL, {"text": "done"}), prompt="go", tools=("Charge",)
    )
    claim = await store.claim("first", ["default"], LEASE)
    assert claim is not None
    return runner, charge, claim


async def test_a_result_refused_for_a_taken_over_claim_is_handed_to_the_heir(
    store: Store, tmp_path: Path
) -> None:
    runner, charge, first = await started(store, tmp_path)
    heirs: list[Claim] = []

    async def taken_over() -> None:
        heirs.append(await take_over(store, first))

    charge.meanwhile = taken_over
    with pytest.raises(Conflict):
        await runner.run(first)  # the tool returned after the takeover: refused
    (kept,) = await store.late_results("t")
    assert (kept.call_id, kept.content, kept.epoch, kept.worker) == (
        "c1",
        "charged, receipt 1",
        first.epoch,
        "first",
    )
    result = await runner.run(heirs[0])
    assert result.state.finished == "done"
    finished = await finished_calls(store)
    assert finished == [
        {
            "v": 1,
            "call_id": "c1",
            "content": "charged, receipt 1",
            "is_error": False,
            "recovery": "late",
            "from_epoch": first.epoch,
        }
    ]
    assert charge.runs == ["t:c1"]  # handed over, not run again


async def test_a_result_for_a_call_already_settled_is_kept_and_ignored(
    store: Store, tmp_path: Path
) -> None:
    runner, charge, first = await started(store, tmp_path)

    async def taken_over_and_settled() -> None:
        heir = await take_over(store, first)
        assert (await runner.run(heir)).state.finished == "done"

    charge.meanwhile = taken_over_and_settled
    with pytest.raises(Conflict):
        await runner.run(first)
    finished = await finished_calls(store)
    assert [(f["recovery"], f["content"]) for f in finished] == [("unknown", OUTCOME_UNKNOWN)]
    (kept,) = await store.late_results("t")
    assert kept.content == "charged, receipt 1"
    assert charge.runs == ["t:c1"]


async def test_a_run_cancelled_after_its_tool_returned_keeps_the_result(
    store: Store, tmp_path: Path
) -> None:
    # The renewer cancels a run whose claim it found lost; if the tool has returned by
    # then, its result must outlive the cancellation.
    runner, charge, first = await started(store, tmp_path)

    async def cancelled_after_return() -> None:
        task = asyncio.current_task()
        assert task is not None
        # Lands at the first await that suspends once the tool has returned: the append.
        asyncio.get_running_loop().call_soon(task.cancel)

    charge.meanwhile = cancelled_after_return
    with pytest.raises(asyncio.CancelledError):
        await runner.run(first)
    await kept_soon(store)
    (kept,) = await store.late_results("t")
    assert kept.content == "charged, receipt 1"
    # Whether the cancelled append landed or not, the call ends with its real result.
    await store.release(first)
    heir = await eventually_claim(store, "heir", ["default"])
    assert (await runner.run(heir)).state.finished == "done"
    finished = await finished_calls(store)
    assert [f["content"] for f in finished] == ["charged, receipt 1"]
    assert charge.runs == ["t:c1"]


class CancelsWhileKeeping:
    """The real store, but keeping a late result first cancels the run: the renewer finds
    the claim lost at that very moment and cancels the run's step (SPEC §3)."""

    def __init__(self, store: Store) -> None:
        self.inner = store
        self.run: asyncio.Future[Any] | None = None

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def keep_late_result(self, result: LateResult) -> bool:
        assert self.run is not None
        self.run.cancel()
        await asyncio.sleep(0)  # the cancellation is delivered before the write is sent
        return await self.inner.keep_late_result(result)


async def test_a_keep_cut_short_by_the_claims_loss_still_lands(
    store: Store, tmp_path: Path
) -> None:
    runner, charge, first = await started(store, tmp_path)
    cancelling = CancelsWhileKeeping(store)
    runner.store = cancelling  # type: ignore[assignment]
    heirs: list[Claim] = []

    async def taken_over() -> None:
        heirs.append(await take_over(store, first))

    charge.meanwhile = taken_over
    cancelling.run = running = asyncio.ensure_future(runner.run(first))
    with pytest.raises(asyncio.CancelledError):
        await running
    await kept_soon(store)
    runner.store = store
    assert (await runner.run(heirs[0])).state.finished == "done"
    finished = await finished_calls(store)
    assert [(f["recovery"], f["content"]) for f in finished] == [("late", "charged, receipt 1")]


async def kept_soon(store: Store) -> None:
    """Wait (polling the store, up to 5 s) for the keep that finishes on its own."""
    for _ in range(500):
        if await store.late_results("t"):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("no late result was kept")


async def finished_calls(store: Store) -> list[dict[str, Any]]:
    """The data of the task's ToolFinished events."""
    return [
        cast(dict[str, Any], e.data) for e in await store.read_log("t") if e.type == "ToolFinished"
    ]
