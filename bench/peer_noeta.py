"""noeta's side of bench/peers.py, under noeta's own venv: a migrated schema, tasks filled
in SQL (ready now, or due in a day), and the idle-pickup probe, for two kinds of work.

"noeta": a one-shot scripted agent task (examples/hello.yaml, no tools: a claim, a load
and two fenced appends of five events). "noeta-job": a plain job, the async `@noeta.tool`
no-op of bench/noop_job.py (a claim, the ToolStarted append, the finishing append), as
the peers' no-ops are async. In a drain, a task starts at its first durable step, read from
the log (the database clock): the agent's PluginsPinned, the job's ToolStarted. In the idle
pickup, each starts as the peers' no-ops do, when its work begins, the time its worker
records: the job's function called, the agent's model request sent
(bench/agent_start/sitecustomize.py); the first durable step is reported beside.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import noop_job  # the sibling modules (bench/ is on sys.path)
import psycopg
import scale_fill as fill
from job_baselines import create_many

from noeta.backends.stores.postgres import PostgresStore, migrate_database
from noeta.client.job_tasks import job_task
from noeta.core.ports import payload
from noeta.core.ports.store import NewEvent, NewTask
from noeta.core.rules import events

URL = os.environ.get("PEER_URL", "")
QUEUE = "bench"
MODEL = f"scripted:{Path(__file__).resolve().parent.parent / 'examples' / 'hello.yaml'}"
GAP = (0.02, 0.5)
# Where the drain starts and how far it got, for bench/peers.py.
FIRST_START = """
SELECT extract(epoch FROM min(created_at))::float8 FROM events WHERE type = 'PluginsPinned'
"""
DONE = "SELECT count(*) FROM tasks WHERE status = 'done'"
PICKED_UP = """
SELECT task_id, extract(epoch FROM created_at)::float8 FROM events
 WHERE type = %s AND task_id = ANY(%s)
"""
NOW_PLUS = "SELECT clock_timestamp() + make_interval(secs => %s)"


def first_event() -> tuple[str, str]:
    kind, data = events.encode(events.TaskCreated(MODEL, "go"))
    return kind, payload.encode(data)


async def reset() -> None:
    async with await psycopg.AsyncConnection.connect(URL, autocommit=True) as admin:
        await admin.execute("DROP SCHEMA IF EXISTS public CASCADE")
        await admin.execute("CREATE SCHEMA public")
    await migrate_database(URL)


async def enqueue(count: int, future: bool) -> None:
    prefix = f"{'later' if future else 'now'}{time.time_ns() % 10**9}-"
    after = 86_400.0 if future else -1.0
    async with await psycopg.AsyncConnection.connect(URL, autocommit=True) as admin:
        await fill.fill_waiting(admin, prefix, count, [QUEUE], first_event(), after=after)
        await admin.execute("ANALYZE")


class LogTail:
    """What a worker's log gained since this was made."""

    def __init__(self, path: str) -> None:
        self.path, self.offset, self.seen = path, os.path.getsize(path), b""

    def read(self) -> bytes:
        with open(self.path, "rb") as log:
            log.seek(self.offset)
            more = log.read()
        self.offset += len(more)
        self.seen += more
        return self.seen


async def enqueue_jobs(count: int, future: bool) -> None:
    """`count` no-op jobs made in SQL through the function create_task calls."""
    prefix = f"{'later' if future else 'now'}{time.time_ns() % 10**9}-"
    async with await psycopg.AsyncConnection.connect(URL, autocommit=True) as admin:
        later = None
        if future:
            cursor = await admin.execute(NOW_PLUS, (86_400.0,))
            later = ((await cursor.fetchone()) or (None,))[0]
        template = job_task("x", noop_job.noop_async, {}, QUEUE, later)  # type: ignore[arg-type]
        await create_many(admin, template, prefix, count)
        await admin.execute("ANALYZE")


def agent_task(task_id: str) -> NewTask:
    return NewTask(task_id, [NewEvent(*events.encode(events.TaskCreated(MODEL, "go")))], QUEUE)


def job(task_id: str) -> NewTask:
    return job_task(task_id, noop_job.noop_async, {}, QUEUE, None)  # type: ignore[arg-type]


async def probe(count: int, log: str) -> dict[str, list[float]]:
    """Create an agent task, wait until the idle worker logs it done, pause, repeat; then
    pickup = its model request (the worker's NOETA_BENCH_STARTS file, beside the log:
    bench/agent_start/sitecustomize.py) - the moment create_task returned, as a peer's
    no-op is timed to its start. `pinned_ms`: its PluginsPinned row, which the idle claim
    writes before its commit (ADR-0136), so earlier than anything a user waits for."""
    found = await probe_started(agent_task, "PluginsPinned", count, log)
    return {"pickup_ms": found["pickup_ms"], "pinned_ms": found["first_step_ms"]}


async def probe_jobs(count: int, log: str) -> dict[str, list[float]]:
    """The same with no-op jobs, timed as the peers' are: pickup = the no-op's own start
    (bench/noop_job.py) - the moment create_task returned. `first_step_ms`: the
    ToolStarted its claim wrote (ADR-0101), which is earlier, before the claim's commit
    and reply and the call."""
    return await probe_started(job, "ToolStarted", count, log)


async def probe_started(
    make: Callable[[str], NewTask], first_step: str, count: int, log: str
) -> dict[str, list[float]]:
    """Tasks made by `make` probed one at a time, each timed to the start its worker
    appended to the file beside `log`; `first_step_ms`: to its `first_step` event."""
    starts = Path(log).with_suffix(".rec")
    before = _lines(starts)
    found = await probe_with(make, first_step, count, log)
    began = [float(line.split()[1]) for line in _lines(starts)[len(before) :]]
    if len(began) != len(found["created"]):
        raise RuntimeError(f"{len(found['created'])} tasks created, {len(began)} starts recorded")
    pickup = [(at - created) * 1000 for at, created in zip(began, found["created"], strict=True)]
    return {"pickup_ms": pickup, "first_step_ms": found["pickup_ms"]}


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def probe_with(
    make: Callable[[str], NewTask],
    started_by: str,
    count: int,
    log: str,
    within: float = 60,
) -> dict[str, list[float]]:
    store = await PostgresStore.open(URL, application_name="bench-probe", max_connections=1)
    created: dict[str, float] = {}
    deadline = time.time() + within
    tail = LogTail(log)
    try:
        for n in range(count):
            task_id = f"probe{os.getpid()}-{n}"
            await store.create_task(make(task_id))
            created[task_id] = time.time()
            while f"task {task_id}: ".encode() not in tail.read():
                if time.time() > deadline:
                    break
                await asyncio.sleep(0.0005)
            if time.time() > deadline:
                break
            await asyncio.sleep(random.uniform(*GAP))
    finally:
        await store.close()
    async with await psycopg.AsyncConnection.connect(URL, autocommit=True) as admin:
        cursor = await admin.execute(PICKED_UP, (started_by, list(created)))
        started: dict[str, Any] = dict(await cursor.fetchall())
    pickup = [(started[t] - c) * 1000 for t, c in created.items() if t in started]
    return {"pickup_ms": pickup, "created": list(created.values())}


NOETA = {"reset": reset, "enqueue": enqueue, "probe": probe}
NOETA_JOB = {"reset": reset, "enqueue": enqueue_jobs, "probe": probe_jobs}
