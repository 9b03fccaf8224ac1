"""What bench/append_rows.py measures of each layout, and the table it prints: one row
per figure, today's `events` beside `event_batches`, and their ratio."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from append_mix import Workload  # sibling modules (bench/ is on sys.path)
from event_batches import LAYOUTS


@dataclass
class Appending:
    """One layout's appends with some number of appenders, summed over the rounds."""

    tasks: int = 0
    seconds: float = 0.0
    wal: int = 0
    images: int | None = 0  # None: pg_walinspect is not installed
    server_cpu: float | None = 0.0  # its backends' (None: not a local server)
    latencies: list[float] = field(default_factory=list)


@dataclass
class Figures:
    """What one layout measured in one workload."""

    appending: dict[int, Appending] = field(default_factory=dict)  # by appenders
    reads: dict[str, list[float]] = field(default_factory=dict)
    storage: dict[str, float] = field(default_factory=dict)
    prune: list[tuple[int, float, int]] = field(default_factory=list)  # tasks, s, WAL
    read_count: int = 0
    read_cpu: float | None = None  # the reading backend's, all reads


def median_ms(values: Sequence[float]) -> float:
    return statistics.median(values) * 1e3


def p95_ms(values: Sequence[float]) -> float:
    return statistics.quantiles(values, n=20)[-1] * 1e3 if len(values) > 1 else values[0] * 1e3


def report(
    workload: Workload, figures: dict[str, Figures], appenders: Sequence[int], rounds: int
) -> None:
    today, batched = (figures[layout.name] for layout in LAYOUTS)
    lines: list[tuple[str, float, float, str]] = []

    def line(name: str, pick: Any, form: str = "{:,.0f}") -> None:
        lines.append((name, pick(today), pick(batched), form))

    line("rows per task", lambda f: f.storage["rows"], "{:,.1f}")
    line("heap+TOAST bytes per task", lambda f: f.storage["heap"])
    line("index bytes per task", lambda f: f.storage["index"])
    for n in appenders:
        line(
            f"WAL bytes, {n} appender(s)", lambda f, n=n: f.appending[n].wal / f.appending[n].tasks
        )
        if today.appending[n].images is not None:
            line(
                f"WAL bytes less full-page images, {n}",
                lambda f, n=n: (
                    (f.appending[n].wal - (f.appending[n].images or 0)) / f.appending[n].tasks
                ),
            )
        if today.appending[n].server_cpu is not None:
            line(
                f"server CPU ms (its backends), {n}",
                lambda f, n=n: 1e3 * (f.appending[n].server_cpu or 0) / f.appending[n].tasks,
                "{:.3f}",
            )
        line(
            f"tasks/s, {n}", lambda f, n=n: f.appending[n].tasks / f.appending[n].seconds, "{:,.1f}"
        )
        line(f"append ms median, {n}", lambda f, n=n: median_ms(f.appending[n].latencies), "{:.3f}")
        line(f"append ms p95, {n}", lambda f, n=n: p95_ms(f.appending[n].latencies), "{:.3f}")
    for name in ("whole log", "from a seq", "one event", "log page"):
        line(f"read {name} ms median", lambda f, name=name: median_ms(f.reads[name]), "{:.3f}")
    if today.read_cpu is not None:
        line(
            "read server CPU ms per read",
            lambda f: 1e3 * (f.read_cpu or 0) / f.read_count,
            "{:.3f}",
        )
    line(
        "prune ms per task",
        lambda f: 1e3 * sum(p[1] for p in f.prune) / sum(p[0] for p in f.prune),
        "{:.3f}",
    )
    line(
        "prune WAL bytes per task",
        lambda f: sum(p[2] for p in f.prune) / sum(p[0] for p in f.prune),
    )
    print(
        f"\n{workload.name}: {workload.events} events in {len(workload.appends)} appends "
        f"(creation included), {rounds} rounds\n"
    )
    print("| per task | events (today) | event_batches | batches ÷ events |")
    print("|---|---|---|---|")
    for name, a, b, form in lines:
        ratio = f"{b / a:.2f}" if a else "-"
        print(f"| {name} | {form.format(a)} | {form.format(b)} | {ratio} |")
