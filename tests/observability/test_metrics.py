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
from noeta.core.errors import Conflict
from noeta.core.ports.queue_settings import QueueChange, queue_settings_store
from noeta.core.ports.store import NewEvent, NewTask, Store
from noeta.core.rules import events
from noeta.core.rules.prices import price_table
from noeta.core.runner.task import TaskRunner
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


async def test_token_usage_follows_the_genai_conventions_and_cost_is_counted(
    store: Store, tmp_path: Path, reader: InMemoryMetricReader
) -> None:
    """Billable input (cached included) and output, by `gen_ai.token.type`; the cost in USD
    at the worker's prices."""
    script = tmp_path / "t.yaml"
    usage = {"input_tokens": 100, "output_tokens": 40, "cache_read_tokens": 1_000_000}
    script.write_text(json.dumps({"replies": [{"text": "done", "usage": usage}]}))
    spec = f"scripted:{script}"
    prices = {"input": 2, "output": 10, "cache_read": 0.5, "cache_write": 0}
    metrics.price_with(price_table({spec: prices}))
    created = events.TaskCreated(model=spec, prompt="go")
    await store.create_task(NewTask("t", [NewEvent(*events.encode(created))]))
    claim = await store.claim("w", ["default"], 60)
    assert claim is not None
    await TaskRunner(store, ProviderRegistry()).run(claim)

    found = points(reader)
    tokens = {p.attributes["gen_ai.token.type"]: p for p in found["gen_ai.client.token.usage"]}
    assert {kind: p.sum for kind, p in tokens.items()} == {"input": 1_000_100, "output": 40}
    assert tokens["input"].attributes["gen_ai.operation.name"] == "chat"
    (cost,) = found["noeta.model.cost"]
    assert cost.value == pytest.approx(0.0002 + 0.0004 + 0.5)
    assert cost.attributes["gen_ai.provider.name"] == "scripted"


async def test_queue_depth_is_the_latest_reading_per_queue_and_an_empty_queue_reads_0(
    store: Store, reader: InMemoryMetricReader
) -> None:
    """The store has no row for an empty queue: the gauge still says 0 for it, and a queue
    emptied since the last reading drops to 0 instead of keeping its old count."""

    async def depth() -> dict[str, int]:
        await metrics.measure_queue_depth(store, ["default", "batch"])
        found = points(reader)
        return {p.attributes["noeta.queue"]: p.value for p in found["noeta.queue.depth"]}

    created = NewEvent(*events.encode(events.TaskCreated(model="scripted:x", prompt="go")))
    await store.create_task(NewTask("t", [created], queue="batch"))
    assert await depth() == {"default": 0, "batch": 1}
    assert await store.claim("w", ["batch"], 60) is not None
    assert await depth() == {"default": 0, "batch": 0}


def test_with_metrics_off_every_call_is_a_no_op() -> None:
    assert not metrics.enabled()
    metrics.claimed(True)
    metrics.model_call(1.0, "scripted", "m", "500")


async def test_running_per_queue_and_key_and_waiting_for_a_slot(
    store: Store, reader: InMemoryMetricReader
) -> None:
    """A queue limited to one: one running (and its key), the other waits for a slot."""
    await queue_settings_store(store).set_queue("batch", QueueChange(concurrency=1))
    created = NewEvent(*events.encode(events.TaskCreated(model="scripted:x", prompt="go")))
    for task_id in ("a", "b"):
        await store.create_task(NewTask(task_id, [created], queue="batch", concurrency_key="t1"))
    assert await store.claim("w", ["batch"], 60) is not None
    await metrics.measure_queue_depth(store, ["default", "batch"])
    found = points(reader)
    running = {
        (p.attributes["noeta.queue"], p.attributes.get("noeta.concurrency_key")): p.value
        for p in found["noeta.queue.running"]
    }
    assert running == {("default", None): 0, ("batch", None): 1, ("batch", "t1"): 1}
    waiting = {p.attributes["noeta.queue"]: p.value for p in found["noeta.queue.waiting_for_slot"]}
    assert waiting == {"default": 0, "batch": 1}


async def test_a_call_a_budget_refused_is_counted_once_with_the_budget(
    store: Store, tmp_path: Path, reader: InMemoryMetricReader
) -> None:
    """A task whose own token budget cannot cover its first request: the call is not
    sent, the refusal is in the log, and the counter says which budget refused it."""
    script = tmp_path / "t.yaml"
    script.write_text(json.dumps({"replies": [{"text": "never sent"}]}))
    created = events.TaskCreated(model=f"scripted:{script}", prompt="go", budget_tokens=1)
    await store.create_task(NewTask("t", [NewEvent(*events.encode(created))]))
    claim = await store.claim("w", ["default"], 60)
    assert claim is not None
    await TaskRunner(store, ProviderRegistry()).run(claim)

    assert [e.type for e in await store.read_log("t")][-2:] == ["BudgetExceeded", "TaskFinished"]
    (refused,) = points(reader)["noeta.model.budget_refused"]
    assert refused.value == 1
    assert refused.attributes["noeta.budget"] == "tokens"
    assert refused.attributes["gen_ai.provider.name"] == "scripted"
    assert "noeta.fleet_budget" not in refused.attributes
