"""What bench/peers.py measured and how it prints: one line per run as it ends, then the
medians per system and noeta's ratios to each peer."""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from worker import table

NOISY = 0.25  # cores used by anything else during a run
NOETA_JOBS = ("noeta-job", "noeta-job-c32")  # a plain no-op job; the others, an agent task
NOETA = ("noeta", "noeta-c32", *NOETA_JOBS)  # run by noeta's own python and `noeta worker`


@dataclass(frozen=True)
class Sizes:
    jobs: int
    backlog: int
    pickups: int
    rounds: int
    processes: tuple[int, ...]


@dataclass
class Result:
    peer: str
    kind: str  # "drain 1", "drain 2", "backlog 1", "pickup"
    values: list[float]  # a rate (one value) or pickup milliseconds
    other: float | None
    load: float
    wal: float | None = None  # WAL bytes per job over the drain
    commits: float | None = None  # transactions committed in the database per job
    cpu: tuple[float, float] | None = None  # workers' and server's CPU ms per job

    @property
    def noisy(self) -> bool:
        return self.other is not None and self.other > NOISY


RUN_HEADERS = ["system", "run", "value", "worker ms/job", "PG ms/job", "cores", "WAL KiB/job"]
RUN_HEADERS += ["commits/job", "other", "load1", ""]


def run_cells(r: Result) -> list[str]:
    shown = f"{r.values[0]:,.0f}/s"
    if r.kind == "pickup":
        shown = f"{median(r.values):.2f} ms" + (
            f" (p99 {p99(r.values):.1f})" if r.values[1:] else ""
        )
    worker, server = (f"{r.cpu[0]:.2f}", f"{r.cpu[1]:.2f}") if r.cpu else ("", "")
    cores = f"{cores_busy(r):.2f}" if r.cpu and r.kind != "pickup" else ""
    wal = "" if r.wal is None else f"{r.wal / 1024:.1f}"
    commits = "" if r.commits is None else f"{r.commits:.2f}"
    other = "" if r.other is None else f"{r.other:.2f}"
    row = [r.peer, r.kind, shown, worker, server, cores, wal, commits, other, f"{r.load:.2f}"]
    return [*row, "noisy" if r.noisy else ""]


def cores_busy(r: Result) -> float:
    """The cores a drain kept busy, its workers' and its server's: rate times CPU a job. At 1.0
    on two cores the worker and the server took turns; near 2.0 they ran side by side."""
    assert r.cpu is not None
    return r.values[0] * (r.cpu[0] + r.cpu[1]) / 1000


def run_line(r: Result) -> str:
    """One finished run, as it ends (the run keeps its figures if a later one fails)."""
    cells = run_cells(r)
    return "  ".join(f"{h}={c}" for h, c in zip(RUN_HEADERS, cells, strict=True) if h and c)


def steady_rate(starts: Sequence[Sequence[float]]) -> float:
    """Jobs started a second while every worker ran: the starts from the latest first start
    to the earliest last start, over that window (ADR-0126). With one worker: (n - 1) /
    (last - first). A worker that started nothing is not counted as running."""
    ran = [sorted(own) for own in starts if own]
    begin, end = max(own[0] for own in ran), min(own[-1] for own in ran)
    if end <= begin:
        raise RuntimeError("the workers never ran at the same time: no drain to measure")
    inside = sum(1 for own in ran for at in own if begin <= at <= end)
    return (inside - 1) / (end - begin)


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def chosen(results: Sequence[Result], peer: str, kind: str) -> list[Result]:
    """The quiet runs of a kind, or all of them when none was quiet."""
    runs = [r for r in results if r.peer == peer and r.kind == kind]
    return [r for r in runs if not r.noisy] or runs


def median_of(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def median_rate(results: Sequence[Result], peer: str, kind: str) -> float | None:
    return median_of([r.values[0] for r in chosen(results, peer, kind)])


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def p99(values: Sequence[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def cost_cells(results: Sequence[Result], peer: str, kinds: Sequence[str]) -> list[str]:
    """Median worker CPU, server CPU and commits per job over the empty-table drains."""
    runs = [r for kind in kinds for r in chosen(results, peer, kind)]
    worker = median_of([r.cpu[0] if r.cpu else None for r in runs])
    server = median_of([r.cpu[1] if r.cpu else None for r in runs])
    commits = median_of([r.commits for r in runs])
    return [f"{v:.2f}" if v is not None else "-" for v in (worker, server, commits)]


def report(results: Sequence[Result], sizes: Sizes, names: Sequence[str]) -> None:
    if not results:
        print("\nno run finished")
        return
    table(
        "Runs (CPU between 10 % and 90 % done; cores: the system's, worker and server,"
        " rate times CPU a job; other: cores used by anything else)",
        RUN_HEADERS,
        [run_cells(r) for r in results],
    )
    kinds = [f"drain {p}" for p in sizes.processes]
    headers = ["system", *[f"{k} jobs/s" for k in kinds], "backlog ÷ empty", "pickup ms", "p99"]
    headers += ["worker ms/job", "PG ms/job", "commits/job"]
    rows, summary = [], {}
    for peer in names:
        rates = [median_rate(results, peer, k) for k in kinds]
        backlog, empty = median_rate(results, peer, "backlog 1"), rates[0]
        ratio = backlog / empty if backlog and empty else None
        picks = [v for r in chosen(results, peer, "pickup") for v in r.values]
        pick = (median(picks), p99(picks)) if len(picks) > 1 else None
        summary[peer] = (rates, pick)
        row = [peer, *[f"{r:,.0f}" if r else "-" for r in rates]]
        row += [f"{ratio:.2f}" if ratio else "-"]
        row += [f"{pick[0]:.2f}", f"{pick[1]:.1f}"] if pick else ["-", "-"]
        rows.append(row + cost_cells(results, peer, kinds))
    for mine in (n for n in NOETA if n in summary):
        my_rates, my_pick = summary[mine]
        for peer in (n for n in names if n not in NOETA):
            rates, pick = summary[peer]
            row = [f"{mine} ÷ {peer}"]
            row += [
                f"{a / b:.2f}" if a and b else "-" for a, b in zip(my_rates, rates, strict=True)
            ]
            row += ["", f"{my_pick[0] / pick[0]:.2f}" if my_pick and pick else "-", ""]
            rows.append([*row, "", "", ""])
    title = (
        f"Medians of the quiet runs (of all runs of a kind if none was quiet):"
        f" {sizes.jobs:,} no-op jobs, backlog {sizes.backlog:,} due in"
        f" a day, {sizes.pickups} pickups a round; CPU and commits per job over the"
        f" empty drains; load {load()}"
    )
    table(title, headers, rows)
