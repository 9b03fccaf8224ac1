"""Spans through an in-memory exporter: their structure and attributes, the record kept in
the log, one trace across a takeover, and the spans a lost claim cut short (ADR-0024)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from noeta.backends.models.registry import ProviderRegistry
from noeta.backends.stores import open_store
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.store import Claim, NewEvent, NewTask, Store
from noeta.core.ports.tool import ToolContext, ToolFlags, ToolOutput
from noeta.core.rules import events
from noeta.core.runner.task import TaskRunner
from noeta.observability import export, observed, tracing
from noeta.observability.span_record import SpanRecord

from ..worker.conftest import until


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = export.make_provider("noeta-test", [SimpleSpanProcessor(exporter)])
    export.install(provider, capture_content=False)
    yield exporter
    tracing.uninstall()


@pytest.fixture
async def store(tmp_path: Path, exporter: InMemorySpanExporter) -> AsyncIterator[Store]:
    store = observed(await open_store(f"sqlite:///{tmp_path / 'noeta.db'}"))
    yield store
    await store.close()


class Echo:
    name = "Echo"
    description = "Echoes its text."
    input_schema: dict[str, JSONValue] = {"type": "object"}  # noqa: RUF012
    flags = ToolFlags()

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.release.set()

    async def run(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput:
        await self.release.wait()
        return ToolOutput(f"echo: {input.get('text')}")


async def add_task(store: Store, folder: Path, task_id: str, *replies: dict[str, Any]) -> None:
    script = folder / f"{task_id}.yaml"
    script.write_text(json.dumps({"replies": list(replies)}))
    created = events.TaskCreated(model=f"scripted:{script}", prompt="go", tools=("Echo",))
    await store.create_task(NewTask(task_id, [NewEvent(*events.encode(created))]))


ECHO = {"tool_calls": [{"id": "c1", "name": "Echo", "input": {"text": "hi"}}]}


def named(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


def parent_of(span: ReadableSpan) -> int:
    return span.parent.span_id if span.parent else 0


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


async def claim(store: Store, worker: str = "w1", lease: float = 60) -> Claim:
    claimed = await store.claim(worker, ["default"], lease)
    assert claimed is not None
    return claimed


async def test_a_task_is_one_trace_of_attempt_turn_chat_and_tool_spans(
    store: Store, tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    await add_task(store, tmp_path, "t", ECHO, {"text": "done"})
    runner = TaskRunner(store, ProviderRegistry(), tools={"Echo": Echo()})
    result = await runner.run(await claim(store))
    assert result.state.finished == "done"

    spans = list(exporter.get_finished_spans())
    assert len({span.context.trace_id for span in spans if span.context}) == 1
    (attempt,) = named(spans, "noeta.attempt")
    (turn,) = named(spans, "noeta.turn")
    chats = named(spans, "chat " + str(tmp_path / "t.yaml"))
    (tool,) = named(spans, "execute_tool Echo")
    assert len(chats) == 2
    assert attempt.parent is None  # the task's first attempt is the root of its trace
    assert parent_of(turn) == span_id(attempt)
    assert all(parent_of(span) == span_id(turn) for span in [*chats, tool])
    assert attempt.attributes is not None and turn.attributes is not None
    assert attempt.attributes["noeta.task.id"] == "t" and attempt.attributes["noeta.epoch"] == 1
    assert attempt.attributes["noeta.seq.first"] == 2
    assert attempt.attributes["noeta.seq.last"] == result.state.last_seq
    assert attempt.attributes["noeta.outcome"] == "done"
    assert turn.attributes["noeta.outcome"] == "answered"

    chat = chats[0].attributes
    assert chat is not None
    assert chat["gen_ai.operation.name"] == "chat"
    assert chat["gen_ai.provider.name"] == "scripted"
    assert chat["gen_ai.request.model"] == str(tmp_path / "t.yaml")
    assert tuple(chat["gen_ai.response.finish_reasons"]) == ("tool_use",)  # type: ignore[arg-type]
    for name in (
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
        "gen_ai.usage.cache_read.input_tokens",
        "gen_ai.usage.cache_creation.input_tokens",
    ):
        assert isinstance(chat[name], int)
    assert "gen_ai.input.messages" not in chat  # content only when opted in
    assert tool.attributes is not None
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "Echo"
    assert tool.attributes["gen_ai.tool.call.id"] == "c1"
    assert "gen_ai.tool.call.arguments" not in tool.attributes

    # Store calls are children at one seam: the claim and the load under the attempt,
    # the append of ToolStarted under the tool's span.
    claims = named(spans, "noeta.store.claim")
    loads = named(spans, "noeta.store.load")
    assert [parent_of(s) for s in [*claims, *loads]] == [span_id(attempt)] * 2
    assert span_id(tool) in {parent_of(s) for s in named(spans, "noeta.store.append")}

    # The log keeps each step's span record: what a later claimer continues from.
    log = await store.read_log("t")
    started = next(e for e in log if e.type == "ToolStarted")
    record = SpanRecord.parse(started.data["trace"])  # type: ignore[index,call-overload]
    assert record is not None
    assert record.trace_id == attempt.context.trace_id  # type: ignore[union-attr]
    assert (record.attempt, record.turn, record.step) == tuple(map(span_id, (attempt, turn, tool)))
    assert record.call == "c1" and record.epoch == 1


async def test_content_is_captured_only_when_opted_in(
    store: Store, tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    provider = export.make_provider("noeta-test", [SimpleSpanProcessor(exporter)])
    export.install(provider, capture_content=True)
    await add_task(store, tmp_path, "t", ECHO, {"text": "done"})
    await TaskRunner(store, ProviderRegistry(), tools={"Echo": Echo()}).run(await claim(store))
    spans = exporter.get_finished_spans()
    (tool,) = named(list(spans), "execute_tool Echo")
    assert tool.attributes is not None
    assert json.loads(str(tool.attributes["gen_ai.tool.call.arguments"])) == {"text": "hi"}
    assert tool.attributes["gen_ai.tool.call.result"] == "echo: hi"
    chat = next(s for s in spans if s.name.startswith("chat "))
    assert chat.attributes is not None and "go" in str(chat.attributes["gen_ai.input.messages"])


async def test_a_takeover_continues_the_trace_and_reports_what_the_lost_claim_cut_short(
    store: Store, tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    await add_task(store, tmp_path, "t", ECHO, {"text": "done"})
    echo = Echo()
    echo.release.clear()  # the first attempt's tool never returns
    runner = TaskRunner(store, ProviderRegistry(), tools={"Echo": echo})
    first = await claim(store, "w1", lease=0.5)
    running = asyncio.create_task(runner.run(first))

    async def tool_started() -> bool:
        return "ToolStarted" in [e.type for e in await store.read_log("t")]

    await until(tool_started, "the first attempt starts the tool")
    # The worker learns its claim is gone (as when renew returns nothing) and stops.
    tracing.claim_lost("t")
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert not named(list(exporter.get_finished_spans()), "noeta.attempt")  # nothing ended

    heir: list[Claim] = []

    async def taken_over() -> bool:
        claimed = await store.claim("w2", ["default"], 60)
        heir.extend([claimed] if claimed else [])
        return claimed is not None

    await until(taken_over, "the lease lapses and another worker takes the task over")
    assert heir[0].taken_over and heir[0].epoch == 2
    echo.release.set()
    result = await runner.run(heir[0])
    assert result.state.finished == "done"

    spans = list(exporter.get_finished_spans())
    assert len({span.context.trace_id for span in spans if span.context}) == 1
    attempts = sorted(named(spans, "noeta.attempt"), key=lambda s: s.attributes["noeta.epoch"])  # type: ignore[index]
    assert [a.attributes["noeta.epoch"] for a in attempts] == [1, 2]  # type: ignore[index]
    lost, second = attempts
    assert lost.attributes["noeta.recovered"] == "takeover"  # type: ignore[index]
    assert lost.status.status_code is StatusCode.ERROR
    assert parent_of(second) == span_id(lost)  # the first attempt is the trace's root
    assert [link.context.span_id for link in second.links] == [span_id(lost)]

    log = await store.read_log("t")
    started = next(e for e in log if e.type == "ToolStarted")
    record = SpanRecord.parse(started.data["trace"])  # type: ignore[index,call-overload]
    assert record is not None
    tools = named(spans, "execute_tool Echo")
    cut = next(s for s in tools if span_id(s) == record.step)  # its original id
    assert cut.attributes["noeta.recovered"] == "takeover"  # type: ignore[index]
    assert cut.attributes["gen_ai.tool.call.id"] == "c1"  # type: ignore[index]
    assert cut.status.status_code is StatusCode.ERROR
    assert cut.start_time == record.step_start
    (lost_turn,) = [s for s in named(spans, "noeta.turn") if span_id(s) == record.turn]
    assert parent_of(cut) == span_id(lost_turn) and parent_of(lost_turn) == span_id(lost)
    # The heir settles the half-done call (Echo is not retry_safe: outcome unknown).
    settled = next(s for s in tools if s is not cut)
    assert settled.attributes["noeta.tool.recovery"] == "unknown"  # type: ignore[index]
    assert second.attributes["noeta.recovery"] == "settle_tool_calls"  # type: ignore[index]
    assert len(tools) == 2


async def test_with_tracing_off_nothing_is_recorded_and_the_store_is_not_wrapped(
    tmp_path: Path,
) -> None:
    store = await open_store(f"sqlite:///{tmp_path / 'noeta.db'}")
    try:
        assert observed(store) is store
        await add_task(store, tmp_path, "t", {"text": "done"})
        await TaskRunner(store, ProviderRegistry()).run(await claim(store))
        called = next(e for e in await store.read_log("t") if e.type == "ModelCalled")
        assert called.data["trace"] == ""  # type: ignore[index,call-overload]
    finally:
        await store.close()


def test_a_span_record_round_trips_and_anything_else_is_no_record() -> None:
    record = SpanRecord(
        1 << 100, 3, 11, 12, 1_700_000_000_000, 13, 1_700_000_000_001, 2, 14, 5, "a b"
    )
    assert SpanRecord.parse(record.encode()) == record
    for text in ("", "v2 1 2", record.encode().replace("v1", "v0"), "v1 x 1 2 3@4 5@6#7 8@9 c"):
        assert SpanRecord.parse(text) is None


async def test_a_handed_back_step_is_reported_once_by_the_next_claimer(
    store: Store, tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    # SIGTERM: the worker cancels the step and releases the claim; its attempt span ends
    # there, but the step's outcome is not in the log, so the next claimer reports it.
    await add_task(store, tmp_path, "t", ECHO, {"text": "done"})
    echo = Echo()
    echo.release.clear()
    runner = TaskRunner(store, ProviderRegistry(), tools={"Echo": echo})
    first = await claim(store, "w1")
    running = asyncio.create_task(runner.run(first))

    async def tool_started() -> bool:
        return "ToolStarted" in [e.type for e in await store.read_log("t")]

    await until(tool_started, "the first attempt starts the tool")
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert await store.release(first)
    echo.release.set()
    second = await claim(store, "w2")
    assert not second.taken_over
    await runner.run(second)

    spans = list(exporter.get_finished_spans())
    attempts = named(spans, "noeta.attempt")
    assert len(attempts) == 2
    assert not any("noeta.recovered" in (a.attributes or {}) for a in attempts)
    started = next(e for e in await store.read_log("t") if e.type == "ToolStarted")
    record = SpanRecord.parse(started.data["trace"])  # type: ignore[index,call-overload]
    assert record is not None
    same_id = [s for s in spans if span_id(s) == record.step]
    assert len(same_id) == 1  # ended by no one else
    assert same_id[0].attributes["noeta.recovered"] == "handback"  # type: ignore[index]


async def test_a_subtasks_trace_links_to_its_parents_execute_tool_agent_span(
    store: Store, tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    from noeta.plugins.core import Agent

    child = tmp_path / "child.yaml"
    child.write_text(json.dumps({"replies": [{"text": "child done"}]}))
    call = {"id": "a", "name": "Agent", "input": {"prompt": "x", "model": f"scripted:{child}"}}
    script = tmp_path / "p.yaml"
    script.write_text(json.dumps({"replies": [{"tool_calls": [call]}, {"text": "done"}]}))
    created = events.TaskCreated(model=f"scripted:{script}", prompt="go", tools=("Agent",))
    await store.create_task(NewTask("p", [NewEvent(*events.encode(created))]))
    runner = TaskRunner(
        store, ProviderRegistry(), tools={"Agent": Agent()}, subagent_models=("scripted:*",)
    )
    for task_id in ("p", "p.a.1", "p"):
        claimed = await store.claim_task("w1", task_id, 60)
        assert claimed is not None
        await runner.run(claimed)

    spans = list(exporter.get_finished_spans())
    (agent_span,) = [s for s in named(spans, "execute_tool Agent")]
    attempts = [s for s in named(spans, "noeta.attempt") if s.attributes]
    (child_attempt,) = [s for s in attempts if s.attributes["noeta.task.id"] == "p.a.1"]
    assert child_attempt.context and agent_span.context
    assert child_attempt.context.trace_id != agent_span.context.trace_id  # its own trace
    assert [link.context.span_id for link in child_attempt.links] == [span_id(agent_span)]
    assert child_attempt.links[0].context.trace_id == agent_span.context.trace_id
