"""Subagents draw on their parent's budget (ADR-0107), end to end with real children on
both stores: a child is launched with what its parent has left; it stops at that; its
handback reports its tree's spend, which the parent's next call is weighed with."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from noeta.backends.stores import open_store
from noeta.core.ports.store import Store, TaskStatus
from noeta.core.rules import events
from tests.core.runner.test_subtasks import agent, create, log_of, run_all, runner, script


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    store = await open_store(store_url, migrate=True)
    yield store
    await store.close()


# A tool call the child's Write refuses (no input): an error result, then its next call.
BAD_WRITE = {"id": "w", "name": "Write", "input": {}}


def decoded(log: list[tuple[str, dict[str, object]]], kind: type) -> list[object]:
    return [e for e in (events.decode(t, d) for t, d in log) if isinstance(e, kind)]


async def test_a_childs_spend_counts_against_its_parents_budget(
    store: Store, tmp_path: Path
) -> None:
    """Parent --max-tokens 1000 spends 100 and launches a child, which gets the 900 left.
    The child's first call spends 950 (allowed on its small estimate), its second is
    refused; it fails and hands back 950 tokens. The parent's next call is weighed with
    them (1,050 spent) and refused: without the child's spend it would have gone."""
    child = script(
        tmp_path,
        {"tool_calls": [BAD_WRITE], "usage": {"input_tokens": 900, "output_tokens": 50}},
        {"text": "never sent"},
    )
    parent = script(
        tmp_path,
        {
            "tool_calls": [agent("a", "part A", model=child)],
            "usage": {"input_tokens": 60, "output_tokens": 40},
        },
        {"text": "never sent either"},
    )
    await create(store, "p", parent, budget_tokens=1000)
    await run_all(store, runner(store))

    child_log = await log_of(store, "p.a.1")
    (created,) = decoded(child_log, events.TaskCreated)
    assert isinstance(created, events.TaskCreated) and created.budget_tokens == 900
    (child_refused,) = decoded(child_log, events.BudgetExceeded)
    assert isinstance(child_refused, events.BudgetExceeded)
    assert (child_refused.spent, child_refused.limit) == ("950", "900")
    parent_log = await log_of(store, "p")
    (returned,) = decoded(parent_log, events.SubtaskReturned)
    assert isinstance(returned, events.SubtaskReturned)
    assert (returned.status, returned.tokens, returned.cost) == ("failed", 950, "0.000000")
    (refused,) = decoded(parent_log, events.BudgetExceeded)
    assert isinstance(refused, events.BudgetExceeded)
    assert (refused.budget, refused.spent, refused.limit) == ("tokens", "1050", "1000")
    finished = events.decode(*parent_log[-1])
    assert isinstance(finished, events.TaskFinished) and finished.status == "failed"
    record = await store.get_task("p")
    assert record is not None and record.status is TaskStatus.FAILED


async def test_a_parent_without_a_budget_gives_its_child_none(store: Store, tmp_path: Path) -> None:
    """Nothing is counted or carried: the child's TaskCreated and its handback are as
    before budgets existed."""
    child = script(tmp_path, {"text": "A done", "usage": {"input_tokens": 5, "output_tokens": 1}})
    parent = script(tmp_path, {"tool_calls": [agent("a", "part A", model=child)]}, {"text": "ok"})
    await create(store, "p", parent)
    await run_all(store, runner(store))
    (created,) = decoded(await log_of(store, "p.a.1"), events.TaskCreated)
    assert isinstance(created, events.TaskCreated) and not created.has_budget
    returned = [d for t, d in await log_of(store, "p") if t == "SubtaskReturned"]
    assert len(returned) == 1 and "tokens" not in returned[0] and "cost" not in returned[0]
