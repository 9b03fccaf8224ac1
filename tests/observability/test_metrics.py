"""Metrics through an in-memory reader: what the store seam and the runner count."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from noeta.backends.models.registry import ProviderRegistry
from noeta.backends.stores import open_store
from noeta.core import events
from noeta.core.errors import Conflict
from noeta.core.runner.task import TaskRunner
from noeta.core.store import NewEvent, NewTask, Store
from noeta.observability import instruments, metrics, observed


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    instruments.install(instruments.make_provider("noeta-test", reader))
    yield reader
    metrics.uninstall()


@pytest.fixture
async def store(tmp_path: Path, reader: InMemoryMetricReader) -> AsyncIterator[Store]:
    store = observed(await open_store(f"sqlite:///{tmp_path / 'noeta.db'}"))
    yield store
    await store.close()


def points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    found: dict[str, list[Any]] = {}
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


async def test_claims_conflicts_and_model_calls_are_counted(
    store: Store, tmp_path: Path, reader: InMemoryMetricReader
) -> None:
    script = tmp_path / "t.yaml"
    script.write_text(json.dumps({"replies": [{"text": "done"}]}))
    created = events.TaskCreated(model=f"scripted:{script}", prompt="go")
    await store.create_task(NewTask("t", [NewEvent(*events.encode(created))]))
    claim = await store.claim("w", ["default"], 60)
    assert claim is not None
    await TaskRunner(store, ProviderRegistry()).run(claim)
    with pytest.raises(Conflict):  # the task is done: this claim can write no more
        await store.append(claim, 1, [NewEvent("late", {})])

    found = points(reader)
    assert [p.value for p in found["noeta.claims"]] == [1]
    assert [p.value for p in found["noeta.conflicts"]] == [1]
    assert "noeta.takeovers" not in found  # a first claim is not a takeover
    (duration,) = found["gen_ai.client.operation.duration"]
    assert duration.count == 1 and duration.attributes["gen_ai.provider.name"] == "scripted"
    assert "error.type" not in duration.attributes


def test_queue_depth_is_the_latest_reading_per_queue(reader: InMemoryMetricReader) -> None:
    metrics.queue_depth({"default": 3, "batch": 0})
    found = points(reader)
    depth = {p.attributes["noeta.queue"]: p.value for p in found["noeta.queue.depth"]}
    assert depth == {"default": 3, "batch": 0}


def test_with_metrics_off_every_call_is_a_no_op() -> None:
    assert not metrics.enabled()
    metrics.claimed(True)
    metrics.model_call(1.0, "scripted", "m", "500")
    metrics.queue_depth({"default": 1})
