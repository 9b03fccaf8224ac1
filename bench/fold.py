"""Benchmark folding: how long a task takes to resume, from scratch and from a snapshot.

For logs of 10,000 and 100,000 events (turns of model calls and tool calls), it measures
in one run, on the same machine:
- `fold` from scratch over decoded events (the kernel alone), and its cost per event;
- a full resume from the store with no snapshot: read the whole log, decode, fold;
- a resume from a snapshot taken 50 events before the end: read the snapshot and the
  tail, decode, fold. Target: under 100 ms for the 100,000-event task;
- linearity: time per event at 100,000 over time per event at 10,000 (1.0 is linear).

Run:  .venv/bin/python bench/fold.py [--dsn DSN]
Without --dsn or NOETA_TEST_POSTGRES_DSN it starts a private PostgreSQL in a temporary
directory. It prints tables and exits 0: it is a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from functools import partial

from noeta.backends.stores.embedded import EmbeddedPostgres, make_home
from noeta.backends.stores.postgres import PostgresStore
from noeta.core.ports.model import Text, ToolCall, Usage
from noeta.core.ports.store import NewEvent, NewTask, Store
from noeta.core.rules import events as ev
from noeta.core.rules.fold import LoggedEvent, fold
from noeta.core.runner.writing import save_snapshot
from noeta.core.task_loading import load_state, snapshot_version, to_logged
from noeta.testing.postgres import with_search_path

SIZES = (10_000, 100_000)
TAIL = 50  # events after the snapshot
BATCH = 2_000  # events per append while building a log


def turn_events(n: int) -> list[ev.Event]:
    """One model call that asks for a tool, and the tool's run: 4 events."""
    call = ToolCall(f"c{n}", "Bash", {"command": f"echo step {n}"})
    return [
        ev.ModelCalled("ab" * 32),
        ev.ModelReplied((Text(f"Step {n}: running a command."), call), "tool_use", Usage(900, 40)),
        ev.ToolStarted(call.id, call.name, call.input),
        ev.ToolFinished(call.id, f"step {n}\n" * 3),
    ]


def make_log(size: int) -> list[ev.Event]:
    log: list[ev.Event] = [ev.TaskCreated("scripted:bench.yaml", prompt="Do 25,000 steps.")]
    n = 0
    while len(log) < size:
        log += turn_events(n)
        n += 1
    return log[:size]


async def build_task(store: Store, task_id: str, log: list[ev.Event]) -> None:
    first = [NewEvent(*ev.encode(log[0]))]
    await store.create_task(NewTask(task_id, first, queue=f"bench-{task_id}"))
    claim = await store.claim_task("bench", task_id, 600)
    assert claim is not None
    seq = 1
    for start in range(1, len(log), BATCH):
        batch = [NewEvent(*ev.encode(event)) for event in log[start : start + BATCH]]
        seq = await store.append(claim, seq, batch)


async def fold_only(logged: list[LoggedEvent]) -> object:
    return fold(logged)


async def best_of(repeats: int, measure: Callable[[], Awaitable[object]]) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        await measure()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


async def main(dsn: str) -> None:
    store = await PostgresStore.open(dsn, migrate=True)
    version = snapshot_version()
    rows = []
    try:
        for size in SIZES:
            task_id = f"fold-{size}"
            log = make_log(size)
            await build_task(store, task_id, log)
            stored = await store.read_log(task_id)
            logged, problem = to_logged(stored)
            assert not problem and len(logged) == size

            fold_seconds = await best_of(5, partial(fold_only, logged))
            full_seconds = await best_of(3, partial(load_state, store, task_id, "no-snapshot"))
            head = fold(logged[: size - TAIL])
            await save_snapshot(store, task_id, version, head)

            resumed = await load_state(store, task_id, version)
            assert resumed == fold(logged), "a snapshot resume must equal the full fold"
            # A worker resuming a task holds no copy of its log: drop the benchmark's own
            # (a million objects the cyclic GC would otherwise keep rescanning).
            del log, stored, logged, head, resumed
            gc.collect()
            snapshot_seconds = await best_of(7, partial(load_state, store, task_id, version))
            rows.append((size, fold_seconds, full_seconds, snapshot_seconds))
            print(f"  {size:,} events: done", flush=True)
    finally:
        await store.close()

    print()
    print("Resuming a task (median of repeats; PostgreSQL, this machine)")
    print(
        f"{'events':>8}  {'fold ms':>8}  {'µs/event':>8}  {'read+fold ms':>12}  "
        f"{'from snapshot ms':>16}  target"
    )
    for size, fold_s, full_s, snap_s in rows:
        target = ""
        if size == 100_000:
            target = f"<100 ms {'PASS' if snap_s < 0.1 else 'MISS'}"
        print(
            f"{size:>8,}  {fold_s * 1e3:>8.1f}  {fold_s / size * 1e6:>8.2f}  "
            f"{full_s * 1e3:>12.1f}  {snap_s * 1e3:>16.1f}  {target}"
        )
    (small, small_fold, _, _), (large, large_fold, _, _) = rows
    ratio = (large_fold / large) / (small_fold / small)
    print(f"\nlinearity: µs/event at {large:,} / at {small:,} = {ratio:.2f} (1.00 is linear)")


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("NOETA_TEST_POSTGRES_DSN"))
    dsn = parser.parse_args().dsn
    server = None
    if not dsn:
        print("starting an embedded PostgreSQL...", flush=True)
        server = EmbeddedPostgres(make_home("noeta-bench-fold-"))
        dsn = server.start()
    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f'CREATE SCHEMA "{schema}"')
    try:
        asyncio.run(main(with_search_path(dsn, schema)))
    finally:
        with psycopg.connect(dsn, autocommit=True) as connection:
            connection.execute(f'DROP SCHEMA "{schema}" CASCADE')
        if server is not None:
            server.stop(mode="immediate")


if __name__ == "__main__":
    run()
