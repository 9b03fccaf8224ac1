"""Captured content is scrubbed before it is cut to its bound: a key that straddles the
bound is hidden whole, not shown in part (its start too short for any pattern)."""

from __future__ import annotations

from pathlib import Path

from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from noeta.backends.models.registry import ProviderRegistry
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.store import Store
from noeta.core.ports.tool import ToolContext, ToolFlags, ToolOutput
from noeta.core.runner.task import TaskRunner
from noeta.observability import export
from noeta.observability.steps import MAX_CONTENT_CHARS

from .test_tracing import add_task, claim, exporter, named, store

__all__ = ["exporter", "store"]  # the fixtures, imported for pytest

KEY = "ghp_aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5"


class Printer:
    """A tool that prints a key right at the bound of captured content."""

    name = "Echo"
    description = "Prints."
    input_schema: dict[str, JSONValue] = {"type": "object"}  # noqa: RUF012
    flags = ToolFlags()

    async def run(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput:
        return ToolOutput("x" * (MAX_CONTENT_CHARS - 11) + " " + KEY + " and more")


async def test_a_key_at_the_content_bound_is_scrubbed_whole(
    store: Store, tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    export.install(export.make_provider("t", [SimpleSpanProcessor(exporter)]), capture_content=True)
    call = {"tool_calls": [{"id": "c1", "name": "Echo", "input": {}}]}
    await add_task(store, tmp_path, "t", call, {"text": "done"})
    await TaskRunner(store, ProviderRegistry(), tools={"Echo": Printer()}).run(await claim(store))
    spans = list(exporter.get_finished_spans())
    (tool,) = named(spans, "execute_tool Echo")
    assert tool.attributes is not None
    result = str(tool.attributes["gen_ai.tool.call.result"])
    assert len(result) <= MAX_CONTENT_CHARS
    assert "ghp_" not in result and result.endswith("x [redacted]")
    for chat in (s for s in spans if s.name.startswith("chat ") and s.attributes):
        assert chat.attributes is not None
        assert "ghp_" not in str(chat.attributes.get("gen_ai.input.messages", ""))
