"""The appends real tasks make, read back from their logs: a `noeta worker` runs a one-shot
scripted agent task and a task of 100 TodoWrite calls, and each task's events are grouped
by the transaction that inserted them (xmin), one group per append, creation first."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from worker import TOOL_CALLS, fresh_bench  # the sibling module (bench/ is on sys.path)

QUEUE = "mix"
READ_APPENDS = """
SELECT xmin::text, type, data FROM events WHERE task_id = %s ORDER BY seq
"""


@dataclass(frozen=True)
class Workload:
    """A task's appends, each one its events' (type, data text) pairs."""

    name: str
    appends: list[list[tuple[str, str]]]  # each append's events, creation first
    sizes: list[list[tuple[str, int]]]  # each append's events: type, data bytes

    @property
    def events(self) -> int:
        return sum(len(append) for append in self.sizes)

    def describe(self) -> str:
        def one(append: list[tuple[str, int]]) -> str:
            return "+".join(f"{kind} {size:,}" for kind, size in append)

        if len(self.sizes) <= 6:
            return " | ".join(one(append) for append in self.sizes)
        shapes = Counter("+".join(kind for kind, _ in append) for append in self.sizes)
        return ", ".join(f"{count} x {shape}" for shape, count in shapes.items())


async def real_workloads(dsn: str) -> list[Workload]:
    """The appends of a one-shot task and of a 100-TodoWrite task, run by a real worker."""
    async with fresh_bench(dsn) as bench:
        todo = {"todos": [{"content": "bench", "status": "pending"}]}
        calls = [{"id": f"c{i}", "name": "TodoWrite", "input": todo} for i in range(TOOL_CALLS)]
        tasks = {
            "one-shot": (bench.ok_model, ()),
            f"{TOOL_CALLS} TodoWrite": (
                bench.script("todo", [{"tool_calls": calls}, {"text": "ok"}]),
                ("TodoWrite",),
            ),
        }
        async with bench.workers(["mix-w"], QUEUE, concurrency=1):
            for number, (model, tools) in enumerate(tasks.values()):
                await bench.create([f"mix-{number}"], QUEUE, model, tools=tools)
            await bench.finished(QUEUE, [f"mix-{n}" for n in range(len(tasks))])
        made = []
        for number, name in enumerate(tasks):
            groups: dict[str, list[tuple[str, str]]] = {}
            for xmin, kind, data in await bench.rows(READ_APPENDS, (f"mix-{number}",)):
                groups.setdefault(xmin, []).append((kind, data))
            appends = list(groups.values())  # dicts keep order: the order of seq
            made.append(
                Workload(
                    name,
                    appends,
                    [[(kind, len(data)) for kind, data in append] for append in appends],
                )
            )
        return made
