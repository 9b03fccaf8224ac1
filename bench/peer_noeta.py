"""noeta's side of bench/peers.py, under noeta's own venv: a migrated schema, one-shot
tasks filled in SQL (ready now, or due in a day), and the idle-pickup probe.

A noeta job is a one-shot scripted task (examples/hello.yaml, no tools: a claim, a load
and two fenced appends of five events); it "starts" at its first durable step, the
PluginsPinned event its claimer appends, as read from the log (the database clock).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path
from typing import Any

import psycopg
import scale_fill as fill  # the sibling module (bench/ is on sys.path)

from noeta.backends.stores.postgres import PostgresStore, migrate_database
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
 WHERE type = 'PluginsPinned' AND task_id = ANY(%s)
"""


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


async def probe(count: int, log: str, within: float = 60) -> dict[str, list[float]]:
    """Create a task, wait until the idle worker logs it done, pause, repeat; then
    pickup = PluginsPinned - the moment create_task returned."""
    store = await PostgresStore.open(URL, application_name="bench-probe", max_connections=1)
    created: dict[str, float] = {}
    deadline = time.time() + within
    first = [NewEvent(*events.encode(events.TaskCreated(MODEL, "go")))]
    tail = LogTail(log)
    try:
        for n in range(count):
            task_id = f"probe{os.getpid()}-{n}"
            await store.create_task(NewTask(task_id, first, QUEUE))
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
        cursor = await admin.execute(PICKED_UP, (list(created),))
        started: dict[str, Any] = dict(await cursor.fetchall())
    return {"pickup_ms": [(started[t] - c) * 1000 for t, c in created.items() if t in started]}


NOETA = {"reset": reset, "enqueue": enqueue, "probe": probe}
