"""Idle wake-ups and PostgreSQL's notify lock (issue 28 item 4, ADR-0087), on real
`noeta worker` processes and a private PostgreSQL (fsync on) with pg_stat_statements.

1. Statements per submit with 1 and with 50 idle workers (--concurrency 1, --poll 300 and
   --lease 3600: no poll and no registration's refresh falls inside), and with 1 idle
   worker of 4 slots: tasks submitted one at a time, each run to done and every worker
   idle again before the next; the server counts the statements (pg_stat_statements).
2. A depth-target run of no-op jobs: producers, one create per job, keep DEPTH jobs
   queued for SECONDS while worker processes drain them; jobs/s, and how many backends
   wait in `Lock:object` (the notify lock), sampled from pg_stat_activity every 50 ms.
3. What a create costs its creator beside the idle fleet of 1.: the bench session's
   wall time a `create_task`, median and p99, for creates that call an idle worker (its
   queue) and, alternately, creates into a queue nobody serves (they call nobody); paced
   (every worker registered again before each pair: the call's own cost) and back to
   back (workers' registrations in flight beside the creates: the wake-up lock's wait).

To compare another checkout's code in the same way:
    PYTHONPATH=<checkout> .venv/bin/python bench/idle_wakeups.py   (always exits 0)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import noop_job  # the sibling module: bench/ is on sys.path
import psycopg
from common import fresh_schema, parser
from worker import Bench, table

from noeta.backends.stores.embedded import EmbeddedPostgres, make_home
from noeta.backends.stores.postgres import PostgresStore
from noeta.client.job_tasks import job_task

BENCH = Path(__file__).parent
SUBMITS = 10
PACED = 30  # pairs of creates, every worker registered again before each
BACK_TO_BACK = 100  # pairs of creates, one after the other
# Whether every worker listens and has ended its last statement.
SETTLED = """
SELECT count(*) FILTER (WHERE a.application_name = 'noeta-listen'),
       count(DISTINCT a.application_name) FILTER (WHERE a.application_name LIKE 'noeta-worker:%%'),
       coalesce(bool_and(a.state = 'idle')
                FILTER (WHERE a.application_name LIKE 'noeta-worker:%%'), true)
  FROM pg_stat_activity AS a WHERE a.datname = current_database()
"""
# And, where registrations exist (ADR-0087), has registered as idle again.
HAS_REGISTRY = "SELECT to_regclass('idle_workers') IS NOT NULL"
REGISTERED = "SELECT count(*) FROM idle_workers"
# The bench's own statements (its reads of pg_stat_*, of tasks) are left out.
STATEMENTS = """
SELECT query, calls FROM public.pg_stat_statements
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND query NOT LIKE '%%pg_stat%%' AND query NOT LIKE '%%FROM tasks WHERE id = ANY%%'
   AND query NOT LIKE '%%count(*) FROM tasks%%' AND query <> 'SELECT clock_timestamp()'
   AND query NOT LIKE '%%to_regclass%%' AND query NOT LIKE 'SELECT count(*) FROM idle_workers%%'
"""
KINDS = {  # a statement's kind, by a fragment only it holds
    "claim": "owner_epoch = t.owner_epoch +",
    "register idle": "noeta_register_idle(",  # it holds seconds_until_due's text too
    "seconds_until_due": "claimable_at > now()",
    "create": "noeta_create_task(",
}
LOCK_OBJECT = """
SELECT count(*) FROM pg_stat_activity
 WHERE wait_event_type = 'Lock' AND wait_event = 'object' AND datname = current_database()
"""
# The creating session's wait, sampled while it creates.
CREATOR_WAITS = """
SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU or wire') FROM pg_stat_activity
 WHERE application_name LIKE 'bench-submit%%' AND state = 'active'
   AND datname = current_database()
"""
DONE = "SELECT count(*) FROM tasks WHERE queue = %s AND status = 'done'"
QUEUED = "SELECT count(*) FROM tasks WHERE queue = %s AND status = 'ready'"


def kind_of(query: str) -> str:
    return next((kind for kind, part in KINDS.items() if part in query), "task's own")


async def settled(bench: Bench, workers: int) -> bool:
    listening, named, idle = (await bench.rows(SETTLED))[0]
    registered = await bench.value(REGISTERED) if await bench.value(HAS_REGISTRY) else workers
    return bool(listening == named == workers and idle and registered == workers)


async def statements_per_submit(
    bench: Bench, idle: int, slots: int, latency_rows: list[list[str]]
) -> list[str]:
    names = [f"idle{idle}x{slots}-w{n}" for n in range(idle)]
    queue = f"idle{idle}x{slots}"
    async with contextlib.AsyncExitStack() as started:
        for first in range(0, idle, 10):  # ten at a time: each batch is up within a minute
            batch = names[first : first + 10]
            await started.enter_async_context(
                bench.workers(batch, queue, concurrency=slots, lease=3600.0, poll=300.0)
            )
        await bench.until(lambda: settled(bench, idle), "every worker waits idle", 300)
        sessions = await bench.value("SELECT count(*) FROM pg_stat_activity")
        print(f"  {idle} idle x {slots} slots: {sessions} server sessions", flush=True)
        await bench.admin.execute("SELECT public.pg_stat_statements_reset()")
        for n in range(SUBMITS):
            await bench.create([f"{queue}-{n}"], queue, bench.ok_model)
            await bench.finished(queue, [f"{queue}-{n}"])
            await bench.until(lambda: settled(bench, idle), "every worker waits again", 300)
        counts = await bench.rows(STATEMENTS)
        for paced, rounds in ((True, PACED), (False, BACK_TO_BACK)):
            latency_rows.append(
                await creator_latency(bench, (idle, slots), queue, rounds, paced=paced)
            )
    by_kind: dict[str, int] = {}
    for query, calls in counts:
        by_kind[kind_of(query)] = by_kind.get(kind_of(query), 0) + calls
    total = sum(by_kind.values())
    shown = ", ".join(f"{kind} {calls / SUBMITS:.1f}" for kind, calls in sorted(by_kind.items()))
    per_submit = f"{total / SUBMITS:.1f} statements per submit ({shown})"
    print(f"  {idle} idle x {slots} slots: {per_submit}", flush=True)
    return [f"{idle} x {slots}", f"{total / SUBMITS:.1f}", shown]


async def creator_latency(
    bench: Bench, fleet: tuple[int, int], queue: str, rounds: int, *, paced: bool
) -> list[str]:
    """The creator's milliseconds a create, calling an idle worker and calling nobody."""
    mode = "paced" if paced else "back-to-back"
    timed: dict[str, list[float]] = {queue: [], f"{queue}-nobody": []}
    waits: dict[str, int] = {}
    creating = asyncio.Event()
    sampling = asyncio.create_task(sample_waits(bench.dsn, creating, waits))
    for n in range(rounds):
        if paced:
            await bench.until(lambda: settled(bench, fleet[0]), "every worker waits", 300)
        for target, times in timed.items():
            creating.set()
            started = time.perf_counter()
            await bench.create([f"{target}-{mode}-{n}"], target, bench.ok_model)
            times.append((time.perf_counter() - started) * 1000)
            creating.clear()
    sampling.cancel()
    await bench.finished(queue, [f"{queue}-{mode}-{n}" for n in range(rounds)])
    await bench.until(lambda: settled(bench, fleet[0]), "every worker waits again", 300)

    def summary(times: list[float]) -> str:
        return f"{statistics.median(times):.1f} / {statistics.quantiles(times, n=100)[98]:.1f}"

    calling, nobody = (summary(times) for times in timed.values())
    label = f"{fleet[0]} x {fleet[1]}"
    sampled = sum(waits.values()) or 1
    shares = sorted(waits.items(), key=lambda item: -item[1])[:3]
    shares += (
        []
        if "Lock:advisory" in dict(shares)
        else [("Lock:advisory", waits.get("Lock:advisory", 0))]
    )
    waited = ", ".join(f"{wait} {count * 100 / sampled:.0f} %" for wait, count in shares)
    print(f"  {label}, {mode}: calling {calling} ms, calling nobody {nobody} ms", flush=True)
    return [label, mode, str(rounds), calling, nobody, f"{waited} ({sampled})"]


async def sample_waits(dsn: str, creating: asyncio.Event, waits: dict[str, int]) -> None:
    """Count what the creating session waits on, every millisecond or so while it creates
    (the wake-up lock, `Lock:advisory`, always shown)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as sampler:
        while True:
            await creating.wait()
            for (wait,) in await (await sampler.execute(CREATOR_WAITS)).fetchall():
                waits[wait] = waits.get(wait, 0) + 1
            await asyncio.sleep(0.001)


async def depth_target(
    bench: Bench, processes: int, concurrency: int, depth: int, seconds: float
) -> list[str]:
    queue = f"depth{processes}x{concurrency}"
    config = bench.scratch / "jobs.yaml"
    config.write_text("plugins:\n  - module: noop_job\n")
    pythonpath = os.pathsep.join(filter(None, [str(BENCH), os.environ.get("PYTHONPATH")]))
    env = {"NOETA_CONFIG": str(config), "PYTHONPATH": pythonpath}
    names = [f"{queue}-w{n}" for n in range(processes)]
    made = 0
    stop = asyncio.Event()

    async def produce(producer: int) -> None:
        nonlocal made
        store = await PostgresStore.open(bench.dsn, application_name="bench-producer")
        try:
            while not stop.is_set():
                if made % 50 == 0 and await bench.value(QUEUED, (queue,)) > depth:
                    await asyncio.sleep(0.02)
                    continue
                made += 1
                job = job_task(f"{queue}-{producer}-{made}", noop_job.noop, {}, queue, None)  # type: ignore[arg-type]
                await store.create_task(job)
        finally:
            await store.close()

    async with bench.workers(names, queue, concurrency=concurrency, env=env):
        producers = [asyncio.create_task(produce(n)) for n in range(4)]
        samples: list[int] = []
        started = time.monotonic()
        done_before = await bench.value(DONE, (queue,))
        async with await psycopg.AsyncConnection.connect(bench.dsn, autocommit=True) as sampler:
            while time.monotonic() - started < seconds:
                row = await (await sampler.execute(LOCK_OBJECT)).fetchone()
                samples.append(int(row[0]) if row else 0)
                await asyncio.sleep(0.05)
        done = await bench.value(DONE, (queue,)) - done_before
        elapsed = time.monotonic() - started
        stop.set()
        await asyncio.gather(*producers)
    return [
        f"{processes} x {concurrency}",
        str(depth),
        f"{done / elapsed:,.0f}",
        f"{statistics.mean(samples):.2f}",
        str(max(samples)),
    ]


async def run(
    dsn: str, idle_counts: Sequence[tuple[int, int]], seconds: float, *, skip_depth: bool
) -> None:
    rows: list[list[str]] = []
    latency_rows: list[list[str]] = []
    for idle, slots in idle_counts:
        async with fresh_schema(dsn) as (url, admin):
            store = await PostgresStore.open(url, application_name="bench-submit")
            bench = Bench(url, admin, store)
            try:
                rows.append(await statements_per_submit(bench, idle, slots, latency_rows))
            finally:
                bench.kill_all()
                await store.close()
                shutil.rmtree(bench.scratch, ignore_errors=True)
    table(
        f"Statements per submit (all sessions, {SUBMITS} submits, one at a time)",
        ["idle workers x slots", "statements", "by kind (per submit)"],
        rows,
    )
    table(
        "The creator's ms a create (median / p99), workers idle beside it; its session's waits",
        ["idle workers x slots", "creates", "pairs", "calling", "calling nobody", "sampled"],
        latency_rows,
    )
    if skip_depth:
        return
    async with fresh_schema(dsn) as (url, admin):
        store = await PostgresStore.open(url, application_name="bench-submit")
        bench = Bench(url, admin, store)
        try:
            plateau = [await depth_target(bench, 4, 16, 200, seconds)]
        finally:
            bench.kill_all()
            await store.close()
            shutil.rmtree(bench.scratch, ignore_errors=True)
    table(
        f"Depth-target no-op jobs ({seconds:g} s; 4 producers, one create per job)",
        ["processes x slots", "depth", "jobs/s", "Lock:object mean", "max"],
        plateau,
    )


def main() -> None:
    options = parser(__doc__)
    options.add_argument("--seconds", type=float, default=20.0)
    options.add_argument("--no-depth", action="store_true", help="skip the depth-target run")
    options.add_argument(
        "--idle", type=int, nargs="*", help="1-slot fleets only, of these sizes (1 50)"
    )
    chosen = options.parse_args()
    idle_counts = [(1, 1), (1, 4), (10 if chosen.quick else 50, 1)]
    if chosen.idle:
        idle_counts = [(idle, 1) for idle in chosen.idle]
    # 50 workers hold about 7 connections each (the bench prints the sessions): 300
    # stopped the 41st.
    counted(
        chosen.dsn,
        500,
        lambda dsn: run(dsn, idle_counts, chosen.seconds, skip_depth=chosen.no_depth),
    )


def counted(dsn: str | None, connections: int, work: Callable[[str], Awaitable[None]]) -> None:
    """Run `work` on the server at `dsn`, else on a private one (fsync on) that allows
    `connections`, with pg_stat_statements; a failure is printed, not raised (a bench
    reports, it does not fail the make target)."""
    settings = {
        "shared_preload_libraries": "pg_stat_statements",
        "max_connections": str(connections),
    }
    embedded = EmbeddedPostgres(make_home("noeta-bench-pg-"), settings=settings)
    try:
        dsn = dsn or embedded.start()
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements SCHEMA public")
        asyncio.run(work(dsn))
    except Exception as error:
        print(f"bench failed: {error!r}")
    finally:
        embedded.stop()
        shutil.rmtree(embedded.root, ignore_errors=True)


if __name__ == "__main__":
    main()
