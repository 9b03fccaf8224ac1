"""What a run costs the worker beside its statements: each event of the log is folded
once per run (issue 28), however many times the run looks ahead before it appends."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from noeta.backends.models.registry import ProviderRegistry
from noeta.backends.stores import open_store
from noeta.core.ports.store import Store
from noeta.core.rules import fold as folding
from noeta.core.rules.events import Event, UnknownEvent
from noeta.core.runner.task import TaskRunner
from tests.core.runner.test_runner import create, run_once, script


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    store = await open_store(f"sqlite:///{tmp_path}/noeta.db", migrate=True)
    yield store
    await store.close()


async def test_a_one_shot_task_folds_each_event_of_its_log_once(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reply that ends the turn, and the turn that ends the task, are decided on folds
    of the events before they land; the append that lands them folds none of them again."""
    applied: list[str] = []
    apply = folding._apply

    def counting(f: folding._Folding, event: Event | UnknownEvent) -> None:
        applied.append(type(event).__name__)
        apply(f, event)

    monkeypatch.setattr(folding, "_apply", counting)
    await create(store, "t-once", script(tmp_path, {"text": "ok"}), prompt="go")
    result = await run_once(TaskRunner(store, ProviderRegistry()), store, "t-once")

    assert result.state.finished == "done"
    logged = [event.type for event in await store.read_log("t-once")]
    assert sorted(applied) == sorted(logged), (applied, logged)
