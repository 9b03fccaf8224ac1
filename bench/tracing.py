"""Benchmark tracing's cost: the same tasks run with tracing off, and on.

Each task is a one-shot task of 10 turns' worth of steps in one turn (a scripted model
asking for a tool call nine times, then answering), run by the real runner on a sqlite
store in a temporary directory. Modes:
- off: no OTEL_* variables: the facade's no-op objects, the store unwrapped;
- on, spans dropped: every span built (attempt, turn, chat, execute_tool, store calls)
  and handed to a batch processor whose exporter discards them — the in-process cost;
- on, metrics too: the same plus the metric instruments (in-memory reader).

Run:  .venv/bin/python bench/tracing.py [--tasks N]
It prints a table and exits 0: it is a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from noeta.backends.models.registry import ProviderRegistry
from noeta.backends.stores import open_store
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.store import NewEvent, NewTask
from noeta.core.ports.tool import ToolContext, ToolFlags, ToolOutput
from noeta.core.rules import events
from noeta.core.runner.task import TaskRunner
from noeta.observability import export, instruments, metrics, observed, tracing

STEPS = 9


class Discard(SpanExporter):
    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


class Echo:
    name = "Echo"
    description = "Echoes."
    input_schema: dict[str, JSONValue] = {"type": "object"}  # noqa: RUF012
    flags = ToolFlags()

    async def run(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput:
        return ToolOutput("echo")


async def run_tasks(folder: Path, tasks: int) -> float:
    """Seconds per task, median of the tasks run."""
    store = observed(await open_store(f"sqlite:///{folder / f'{time.time_ns()}.db'}"))
    call = {"tool_calls": [{"id": "c", "name": "Echo", "input": {}}]}
    script = folder / "script.yaml"
    script.write_text(json.dumps({"replies": [call] * STEPS + [{"text": "done"}]}))
    runner = TaskRunner(store, ProviderRegistry(), tools={"Echo": Echo()})
    durations = []
    try:
        for n in range(tasks):
            created = events.TaskCreated(model=f"scripted:{script}", prompt="go", tools=("Echo",))
            await store.create_task(NewTask(f"t{n}", [NewEvent(*events.encode(created))]))
            started = time.perf_counter()
            claim = await store.claim("bench", ["default"], 60)
            assert claim is not None
            result = await runner.run(claim)
            durations.append(time.perf_counter() - started)
            assert result.state.finished == "done", result.state
    finally:
        await store.close()
    return statistics.median(durations)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=200)
    arguments = parser.parse_args()
    rows: list[tuple[str, float, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        off = asyncio.run(run_tasks(Path(folder), arguments.tasks))
        rows.append(("off", off, "-"))
        exporter = Discard()
        export.install(export.make_provider("bench", [BatchSpanProcessor(exporter)]))
        on = asyncio.run(run_tasks(Path(folder), arguments.tasks))
        tracing.shutdown()
        rows.append(("on, spans dropped", on, exporter.spans // arguments.tasks))
        exporter = Discard()
        export.install(export.make_provider("bench", [BatchSpanProcessor(exporter)]))
        instruments.install(instruments.make_provider("bench", InMemoryMetricReader()))
        both = asyncio.run(run_tasks(Path(folder), arguments.tasks))
        tracing.shutdown()
        tracing.uninstall()
        metrics.uninstall()
        rows.append(("on, metrics too", both, exporter.spans // arguments.tasks))
    steps = 2 * STEPS + 1  # model calls and tool calls per task
    print(f"{arguments.tasks} tasks of {steps} steps each, sqlite, median per task")
    print(f"{'tracing':<20} {'ms/task':>9} {'us/step over off':>17} {'spans/task':>11}")
    for name, seconds, spans in rows:
        extra = (seconds - off) / steps * 1e6
        print(f"{name:<20} {seconds * 1000:>9.2f} {extra:>17.0f} {spans!s:>11}")


if __name__ == "__main__":
    main()
