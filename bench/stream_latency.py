"""Streamed replies to their readers (issue 34, ADR-0105): how soon a reader sees the
first text, and what 1,000 readers of one task cost.

A real `noeta worker` runs tasks whose model is the Anthropic fake, served from this
process (its clock, CLOCK_MONOTONIC, is the readers' too).
- first text: for each sample the fake holds a reply before its first byte until the
  task is followed and its reader listens, then streams it; the latency is from the
  fake writing the stream's first byte to an `AsyncClient.stream` reader (in this
  process) holding the first text. Printed: median, p90, max.
- readers: one task streaming a paced reply (`--pieces` pieces, `--pace` s apart), read
  by nobody, by 1,000 readers in one process (one client: one feed), and by 1,000 in
  `--processes` processes (one feed each). Printed: the task's time from the fake's
  first byte to the task seen done (polled every 50 ms), the worker's CPU and the
  database's CPU (its backends alive at the end, from /proc) over that time, and the
  reading processes' own CPU (they share the machine with the worker).

Run:  .venv/bin/python bench/stream_latency.py [--samples N] [--readers N] [--quick]
It always exits 0: the figures are printed, not checked.
"""

from __future__ import annotations

import asyncio
import os
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import fresh_schema, parser, server

from noeta.backends.stores import open_store
from noeta.client import AsyncClient
from noeta.client.stream_items import StreamText
from noeta.core.ports.reply_streams import ReplyStreams
from noeta.core.ports.store import NewEvent, NewTask, Store
from noeta.core.rules import events
from noeta.core.runner.reply_streams import FOLLOWED_SECONDS
from noeta.testing.fake_providers import FakeAnthropic, Reply

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICKS


async def database_pids(admin: Any) -> list[int]:
    rows = await (await admin.execute("SELECT pid FROM pg_stat_activity")).fetchall()
    return [row[0] for row in rows]


async def create(store: Store, task_id: str) -> None:
    created = events.TaskCreated(model="anthropic:bench-model", prompt="stream to me")
    await store.create_task(NewTask(task_id, [NewEvent(*events.encode(created))]))


async def wait_done(store: Store, task_id: str) -> None:
    while True:
        task = await store.get_task(task_id)
        if task is not None and task.status.finished:
            return
        await asyncio.sleep(0.05)


async def held_until_followed(fake: FakeAnthropic, port: ReplyStreams, task_id: str) -> None:
    """Followed, and the worker's list of followed tasks older than the follow."""
    await port.follow(task_id)
    await asyncio.sleep(FOLLOWED_SECONDS + 0.2)
    await asyncio.to_thread(fake.paused.wait, 60)


async def first_text(url: str, samples: int) -> list[float]:
    latencies = []
    async with AsyncClient(url, start_embedded=False) as client:
        store = await client.store()
        port = store.capabilities.reply_streams
        assert port is not None
        for number in range(samples):
            task_id = f"first-{number}"
            FAKE.paused.clear()
            FAKE.resume.clear()
            FAKE.script(Reply(text="word " * 100, piece_chars=5, pause_after=0))
            await create(store, task_id)
            await held_until_followed(FAKE, port, task_id)
            reader = client.stream(task_id)
            first = asyncio.ensure_future(anext(reader))
            await asyncio.sleep(0.5)  # the reader's feed listening (a bench may sleep)
            streams = len(FAKE.first_bytes)
            FAKE.resume.set()
            item = await asyncio.wait_for(first, 60)
            while not isinstance(item, StreamText):  # said, not counted
                print(f"  sample {number}: {item} before the first text")
                item = await asyncio.wait_for(anext(reader), 60)
            seen = time.monotonic()
            latencies.append(seen - FAKE.first_bytes[streams])
            async for _ in reader:
                pass
    return latencies


READER_CHILD = """
import asyncio, sys
from noeta.client import AsyncClient

async def main(url, task_id, readers):
    async with AsyncClient(url, start_embedded=False) as client:
        async def one():
            async for _ in client.stream(task_id):
                pass
        running = [asyncio.ensure_future(one()) for _ in range(readers)]
        await asyncio.sleep(0.5)
        print("ready", flush=True)
        await asyncio.gather(*running)

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


@dataclass(frozen=True)
class ReaderRun:
    url: str
    admin: Any
    worker: int  # the worker's pid
    pieces: int
    pace: float


async def many_readers(run: ReaderRun, label: str, readers: int, processes: int) -> list[str]:
    task_id = f"readers-{processes}-{readers}"
    FAKE.paused.clear()
    FAKE.resume.clear()
    FAKE.part_seconds = run.pace
    FAKE.script(Reply(text="word " * run.pieces, piece_chars=5, pause_after=0))
    store = await open_store(run.url)
    children: list[asyncio.subprocess.Process] = []
    try:
        port = store.capabilities.reply_streams
        assert port is not None
        await create(store, task_id)
        if readers:
            await held_until_followed(FAKE, port, task_id)
        for _ in range(processes if readers else 0):
            child = await asyncio.create_subprocess_exec(
                sys.executable, "-c", READER_CHILD, run.url, task_id, str(readers // processes),
                stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            children.append(child)
        for child in children:
            assert child.stdout is not None
            await child.stdout.readline()
        await asyncio.to_thread(FAKE.paused.wait, 60)
        pids = await database_pids(run.admin)
        before = cpu_seconds([run.worker]), cpu_seconds(pids)
        children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        FAKE.resume.set()
        await wait_done(store, task_id)
        reply_seconds = time.monotonic() - started
        after = cpu_seconds([run.worker]), cpu_seconds(pids)
        for child in children:
            await asyncio.wait_for(child.wait(), 120)
        children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        readers_cpu = sum(
            getattr(children_after, field) - getattr(children_before, field)
            for field in ("ru_utime", "ru_stime")
        )
    finally:
        for child in children:
            if child.returncode is None:
                child.kill()
        await store.close()
    worker_cpu, database_cpu = after[0] - before[0], after[1] - before[1]
    cells = [reply_seconds, worker_cpu, database_cpu, readers_cpu]
    return [label, *(f"{cell:.2f}" for cell in cells)]


def table(rows: list[list[str]], head: list[str]) -> None:
    widths = [max(len(str(row[i])) for row in [head, *rows]) for i in range(len(head))]
    for row in [head, *rows]:
        print("  ".join(str(cell).rjust(width) for cell, width in zip(row, widths, strict=True)))


FAKE = FakeAnthropic()


async def main() -> None:
    arguments = parser(__doc__)
    arguments.add_argument("--samples", type=int, default=30)
    arguments.add_argument("--readers", type=int, default=1000)
    arguments.add_argument("--processes", type=int, default=8)
    arguments.add_argument("--pieces", type=int, default=1000)
    arguments.add_argument("--pace", type=float, default=0.01)
    options = arguments.parse_args()
    if options.quick:
        options.samples, options.readers, options.pieces = 5, 100, 200
    with server(options.dsn) as dsn, FAKE, tempfile.TemporaryDirectory() as home:
        async with fresh_schema(dsn) as (url, admin):
            env = {
                **os.environ,
                "NOETA_STORE": url,
                "NOETA_HOME": home,
                "ANTHROPIC_API_KEY": "sk-bench-not-a-key",
                "ANTHROPIC_BASE_URL": FAKE.base_url,
            }
            worker = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "noeta", "worker", "--lease", "30", "--name", "bench",
                env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            try:
                latencies = await first_text(url, options.samples)
                ms = sorted(1000 * seconds for seconds in latencies)
                print(f"\nfirst text, fake's first byte -> a stream reader ({len(ms)} samples)")
                p90 = ms[int(0.9 * (len(ms) - 1))]
                table(
                    [[f"{statistics.median(ms):.1f}", f"{p90:.1f}", f"{ms[-1]:.1f}"]],
                    ["median ms", "p90 ms", "max ms"],
                )
                print(f"\none task, {options.pieces} pieces {options.pace * 1000:.0f} ms apart")
                run = ReaderRun(url, admin, worker.pid, options.pieces, options.pace)
                many, processes = options.readers, options.processes
                rows = [
                    await many_readers(run, "no reader", 0, 0),
                    await many_readers(run, f"{many} in 1 process", many, 1),
                    await many_readers(run, f"{many} in {processes} processes", many, processes),
                ]
                table(
                    rows, ["readers", "task s", "worker CPU s", "database CPU s", "readers' CPU s"]
                )
            finally:
                worker.terminate()
                await worker.wait()


if __name__ == "__main__":
    asyncio.run(main())
