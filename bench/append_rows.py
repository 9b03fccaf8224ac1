"""Fewer rows per append? Today's `events` (a row per event) beside the prototype
`event_batches` (a row per append), driven alike, measured side by side (ADR-0089).

On one PostgreSQL server (fsync on) it makes two scratch schemas, each migrated by noeta's
own migrations: the first keeps today's `events` (its primary key and its foreign key to
tasks, as every noeta schema has them) and appends through the real
noeta_append_and_continue / noeta_append_and_finish; the second adds `event_batches`
(bench/event_batches.py) and the same two functions with one INSERT of one row (the
client sends the types and the events' texts joined into one JSON array). The
appends replayed are those of real tasks (bench/append_mix.py: a `noeta worker` runs a
one-shot scripted agent task and a task of 100 TodoWrite calls; their logs, grouped by
inserting transaction). Each appender, on its own connection, creates a task already
claimed with its first events, then sends the task's appends one transaction each.

Per workload and per layout: rows, heap (with TOAST) and index bytes per task; WAL bytes
per task (pg_current_wal_lsn before and after a phase, a CHECKPOINT before each so both
pay the same full-page images; without them too, where pg_walinspect can be installed);
the server CPU of the appenders' backends (/proc, a local server only: unlike times, it
hardly moves with the machine's load); tasks/s and append latency with 1 and N appenders;
the readers' statements (a whole log, from a seq, one event by seq, a web log page), whose
answers are checked equal on both layouts, their latency and the reading backend's CPU;
prune (DELETE of finished tasks' events in batches). Rounds interleave the layouts (A B,
then B A) so the machine's load hits both alike. Autovacuum is off on the scratch tables
(it would write WAL into either phase); each workload is vacuumed before its reads.

Run:  .venv/bin/python bench/append_rows.py [--dsn DSN] [--quick] [--rounds N]
Without --dsn or NOETA_TEST_POSTGRES_DSN it starts a private embedded PostgreSQL in a
temporary directory. It always exits 0: it prints figures, it is not a test.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from append_mix import Workload, real_workloads  # sibling modules (bench/ is on sys.path)
from append_rows_figures import Appending, Figures, report
from common import parser, server
from event_batches import LAYOUTS, SETUP, Layout
from worker import cpu_seconds

from noeta.backends.stores.postgres import migrate_database
from noeta.core.ports import payload
from noeta.testing.postgres import with_search_path

READ_REPEATS = 3  # each read, on each task sampled
PAGE = 50  # events per web log page read
BATCH_EVENTS = 2000  # events per prune batch (a one-shot task's log: ~6)


@dataclass(frozen=True)
class Sizes:
    rounds: int
    one_shot_tasks: int  # per phase
    tool_tasks: int  # per phase
    appenders: tuple[int, ...]
    reads: int  # tasks whose logs are read, per workload


FULL = Sizes(rounds=3, one_shot_tasks=300, tool_tasks=4, appenders=(1, 4), reads=100)
QUICK = Sizes(rounds=2, one_shot_tasks=40, tool_tasks=2, appenders=(1, 2), reads=20)


@dataclass
class Side:
    """A layout in its own migrated schema, with a connection whose search_path is it."""

    layout: Layout
    url: str
    admin: psycopg.AsyncConnection[Any]
    walinspect: str | None  # the schema of pg_walinspect's functions, if installed

    async def rows(self, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        cursor = await self.admin.execute(statement, params)
        return await cursor.fetchall() if cursor.description else []

    async def value(self, statement: str, params: Any = None) -> Any:
        return (await self.rows(statement, params))[0][0]

    async def lsn(self) -> str:
        return str(await self.value("SELECT pg_current_wal_lsn()"))

    async def wal_since(self, lsn: str) -> tuple[int, int | None]:
        """The WAL bytes written since `lsn`, and of them the full-page images' (if
        pg_walinspect is installed: they depend on when the last checkpoint was)."""
        end = await self.lsn()
        total = int(await self.value("SELECT pg_wal_lsn_diff(%s, %s)", (end, lsn)))
        if self.walinspect is None:
            return total, None
        images = await self.value(
            f"SELECT sum(fpi_size) FROM {self.walinspect}.pg_get_wal_stats(%s, %s)", (lsn, end)
        )
        return total, int(images or 0)

    def backend_cpu(self) -> float | None:
        return server_cpu([self.admin.info.backend_pid])


def server_cpu(backends: Sequence[int]) -> float | None:
    """The CPU seconds these server backends used so far, if the server runs on this
    machine (their /proc entries are postgres processes), else None."""
    try:
        if not all(b"postgres" in Path(f"/proc/{pid}/cmdline").read_bytes() for pid in backends):
            return None
        return sum(cpu_seconds(pid) for pid in backends)
    except OSError:
        return None


@contextlib.asynccontextmanager
async def sides(dsn: str) -> AsyncIterator[list[Side]]:
    """A migrated scratch schema per layout; both dropped afterwards, whatever happens."""
    made: list[tuple[str, psycopg.AsyncConnection[Any]]] = []
    try:
        walinspect = await install_walinspect(dsn, made)
        opened = []
        for layout in LAYOUTS:
            schema = f"rows_{layout.name}_{uuid.uuid4().hex[:8]}"
            admin = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
            made.append((schema, admin))
            await admin.execute(f'CREATE SCHEMA "{schema}"')
            url = with_search_path(dsn, schema)
            await migrate_database(url)
            await admin.execute(f'SET search_path = "{schema}"')
            for statement in SETUP[layout.name]:
                await admin.execute(statement)
            for relation in ("tasks", layout.table):
                await admin.execute(f"ALTER TABLE {relation} SET (autovacuum_enabled = off)")
            opened.append(Side(layout, url, admin, walinspect))
        yield opened
    finally:
        for schema, admin in made:
            await admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
            await admin.close()


async def install_walinspect(
    dsn: str, made: list[tuple[str, psycopg.AsyncConnection[Any]]]
) -> str | None:
    """pg_walinspect in a scratch schema of its own (added to `made`, dropped with the
    others), or None where it cannot be (not a superuser, not shipped)."""
    schema = f"rows_walinspect_{uuid.uuid4().hex[:8]}"
    admin = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    made.append((schema, admin))
    await admin.execute(f'CREATE SCHEMA "{schema}"')
    try:
        await admin.execute(f'CREATE EXTENSION pg_walinspect SCHEMA "{schema}"')
    except psycopg.Error:
        return None
    return f'"{schema}"'


async def append_phase(
    side: Side, workload: Workload, ids: Sequence[Sequence[str]], figures: Figures
) -> None:
    """Each appender's tasks created and appended to, one after another; the appenders all
    at once, each on its own connection."""
    layout = side.layout
    connections = [await psycopg.AsyncConnection.connect(side.url, autocommit=True) for _ in ids]
    latencies: list[float] = []

    async def appender(
        connection: psycopg.AsyncConnection[Any], tasks: Sequence[str], timed: bool = True
    ) -> None:
        for task in tasks:
            created = {"task": task, **layout.encode(workload.appends[0])}
            cursor = await connection.execute(layout.create, created)
            seq = (await cursor.fetchone() or (0,))[0]
            for number, events in enumerate(workload.appends[1:], start=2):
                last = number == len(workload.appends)
                statement = layout.append_and_finish if last else layout.append_and_continue
                params = {"task": task, "seq": seq, **layout.encode(events)}
                began = time.perf_counter()
                cursor = await connection.execute(statement, params)
                seq = (await cursor.fetchone() or (0,))[0]
                if timed:
                    latencies.append(time.perf_counter() - began)

    try:
        # A task per connection first, not counted: its functions compiled, its
        # statements prepared (psycopg prepares one at its fifth run), as in a worker.
        warm = [[f"{tasks[0]}-warm-{n}" for n in range(5)] for tasks in ids]
        await asyncio.gather(
            *(appender(c, t, False) for c, t in zip(connections, warm, strict=True))
        )
        await side.admin.execute("CHECKPOINT")
        backends = [connection.info.backend_pid for connection in connections]
        lsn, cpu = await side.lsn(), server_cpu(backends)
        began = time.perf_counter()
        await asyncio.gather(*(appender(c, t) for c, t in zip(connections, ids, strict=True)))
        seconds = time.perf_counter() - began
        wal, images = await side.wal_since(lsn)
        cpu_after = server_cpu(backends)
    finally:
        for connection in connections:
            await connection.close()
    summed = figures.appending.setdefault(len(ids), Appending())
    summed.tasks += sum(len(tasks) for tasks in ids)
    summed.seconds += seconds
    summed.wal += wal
    summed.images = None if images is None or summed.images is None else summed.images + images
    if cpu is None or cpu_after is None or summed.server_cpu is None:
        summed.server_cpu = None
    else:
        summed.server_cpu += cpu_after - cpu
    summed.latencies += latencies


def read_statements(layout: Layout, task: str, events: int) -> dict[str, tuple[str, Any]]:
    """The readers' statements on one task's log, each with its parameters."""
    middle = events // 2
    return {
        "whole log": (layout.read_log, {"task": task, "after": 0}),
        "from a seq": (layout.read_log, {"task": task, "after": middle}),
        "one event": (
            layout.event_text,
            {"task": task, "seq": middle + 1, "start": 1, "length": 1 << 20},
        ),
        "log page": (
            layout.log_page,
            {"task": task, "after": middle, "limit": PAGE, "inline": 65536, "preview": 2000},
        ),
    }


def comparable(name: str, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The rows without their created_at (each layout stamped its own)."""
    if name in ("whole log", "from a seq"):
        return [row[:4] + row[5:] for row in rows]
    if name == "log page":
        return [row[:2] + row[3:] for row in rows]
    return rows


async def read_side(
    pair: Sequence[Side], workload: Workload, tasks: Sequence[str], figures: dict[str, Figures]
) -> None:
    """Each reader's statement on each task, READ_REPEATS times, layouts alternating;
    the answers checked equal."""
    for number, task in enumerate(tasks):
        order = pair if number % 2 == 0 else list(reversed(pair))
        for name in read_statements(LAYOUTS[0], task, workload.events):
            answers: dict[str, list[tuple[Any, ...]]] = {}
            for _ in range(READ_REPEATS):
                for side in order:
                    statement, params = read_statements(side.layout, task, workload.events)[name]
                    began = time.perf_counter()
                    rows = await side.rows(statement, params)
                    elapsed = time.perf_counter() - began
                    figures[side.layout.name].read_count += 1
                    if number:  # the first task warms the plans up
                        figures[side.layout.name].reads.setdefault(name, []).append(elapsed)
                    answers[side.layout.name] = comparable(name, rows)
            first, second = answers.values()
            if first != second or not first:
                raise RuntimeError(f"{name} of {task} differs between the layouts")


async def prune_side(
    pair: Sequence[Side], workload: Workload, tasks: Sequence[str], figures: dict[str, Figures]
) -> None:
    """Every task's events deleted, a batch at a time, layouts alternating by batch."""
    size = max(1, min(100, BATCH_EVENTS // workload.events))
    for side in pair:
        await side.admin.execute("CHECKPOINT")
    for number, start in enumerate(range(0, len(tasks), size)):
        batch = list(tasks[start : start + size])
        for side in pair if number % 2 == 0 else list(reversed(pair)):
            lsn = await side.lsn()
            began = time.perf_counter()
            await side.admin.execute(side.layout.prune, {"ids": batch})
            elapsed = time.perf_counter() - began
            wal, _ = await side.wal_since(lsn)
            figures[side.layout.name].prune.append((len(batch), elapsed, wal))


async def storage(side: Side) -> dict[str, float]:
    """Rows and bytes per task of the layout's table (its warm-up tasks count too: they
    are tasks like the others)."""
    table_name = side.layout.table
    await side.admin.execute(f"VACUUM (ANALYZE) tasks, {table_name}")
    heap, index, rows, events, tasks = (
        await side.rows(
            f"SELECT pg_table_size('{table_name}'), pg_indexes_size('{table_name}'),"
            f" count(*), sum({side.layout.row_events}), (SELECT count(*) FROM tasks)"
            f" FROM {table_name}"
        )
    )[0]
    return {
        "rows": rows / tasks,
        "heap": heap / tasks,
        "index": index / tasks,
        "events": float(events) / tasks,
    }


async def measure(
    pair: Sequence[Side], workload: Workload, per_phase: int, sizes: Sizes
) -> dict[str, Figures]:
    figures = {side.layout.name: Figures() for side in pair}
    slug = workload.name.split()[0]
    made: list[str] = []
    for appenders in sizes.appenders:
        for round_number in range(sizes.rounds):
            ids = [
                [
                    f"{slug}-{appenders}-{round_number}-{a}-{k}"
                    for k in range(per_phase // appenders)
                ]
                for a in range(appenders)
            ]
            made += [task for tasks in ids for task in tasks]
            for side in pair if round_number % 2 == 0 else list(reversed(pair)):
                await append_phase(side, workload, ids, figures[side.layout.name])
    for side in pair:
        figures[side.layout.name].storage = await storage(side)
    step = max(1, len(made) // (sizes.reads + 1))
    cpu = [side.backend_cpu() for side in pair]
    await read_side(pair, workload, made[::step][: sizes.reads + 1], figures)
    for side, before in zip(pair, cpu, strict=True):
        after = side.backend_cpu()
        if before is not None and after is not None:
            figures[side.layout.name].read_cpu = after - before
    await prune_side(pair, workload, made, figures)
    for side in pair:
        await side.admin.execute("TRUNCATE tasks CASCADE")
    return figures


# Texts the events table keeps exactly (ASCII JSON, noeta/core/ports/payload.py) that a
# JSON split could change: a NUL, a lone surrogate, escapes, a nested array.
AWKWARD = [
    ("Awkward", payload.encode({"text": "nul \x00 here", "lone": "\ud800", "n": [1, [2]]})),
    ("Awkward", payload.encode({"text": 'quote " backslash \\ tab \t', "e": "\u00e9"})),
]


async def check_awkward_payloads(pair: Sequence[Side]) -> None:
    """A log of awkward texts reads back the same, text for text, from both layouts."""
    for side in pair:
        created = {"task": "awkward", **side.layout.encode(AWKWARD[:1])}
        await side.admin.execute(side.layout.create, created)
        appended = {"task": "awkward", "seq": 1, **side.layout.encode(AWKWARD)}
        await side.admin.execute(side.layout.append_and_finish, appended)
        read = await side.rows(side.layout.read_log, {"task": "awkward", "after": 0})
        if [(row[2], row[3]) for row in read] != [AWKWARD[0], *AWKWARD]:
            raise RuntimeError(f"{side.layout.name} changed an awkward text")
        await side.admin.execute("TRUNCATE tasks CASCADE")
    print("  awkward texts (NUL, a lone surrogate, escapes) read back exactly from both")


async def run(dsn: str, sizes: Sizes) -> None:
    print("running a one-shot task and a 100-TodoWrite task on a real worker for the mix...")
    workloads = await real_workloads(dsn)
    for workload in workloads:
        print(f"  {workload.name}: {workload.describe()}")
    per_phase = {workloads[0].name: sizes.one_shot_tasks, workloads[1].name: sizes.tool_tasks}
    async with sides(dsn) as pair:
        await check_awkward_payloads(pair)
        for workload in workloads:
            figures = await measure(pair, workload, per_phase[workload.name], sizes)
            report(workload, figures, sizes.appenders, sizes.rounds)


def main() -> None:
    options = parser(__doc__)
    options.add_argument("--rounds", type=int, help="rounds of each layout (default 3)")
    chosen = options.parse_args()
    sizes = QUICK if chosen.quick else FULL
    if chosen.rounds:
        sizes = dataclasses.replace(sizes, rounds=chosen.rounds)
    with server(chosen.dsn) as dsn:
        asyncio.run(run(dsn, sizes))
    print(f"\nload average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
