"""Benchmark `noeta scheduler`: how soon a due timer runs, and how fast cron catches up.

Every figure comes from real `noeta worker` / `noeta scheduler` processes on one
PostgreSQL server (fsync on); times are the database clock's.

1. Timer promptness. One idle worker with --poll 30 (it sleeps between looks) and tasks
   created already waiting for a due time 1-4 s ahead (as a ScheduleWakeup leaves them),
   after the worker went idle, so it cannot know of them. Delay = the task's first write
   (PluginsPinned) - its due time; with a scheduler running (it NOTIFYs the queue when the
   time comes) and without one (the worker finds them at its next poll). The baseline is
   the run without a scheduler, in the same run.
2. Cron catch-up. A per-minute schedule whose mark is N minutes old, missed: run_all,
   max_catch_up N, overlap allow: slots handled per second by 1 and by 2 schedulers
   racing (each slot still fires once: checked).

Run:  .venv/bin/python bench/scheduler.py [--dsn DSN] [--quick]
Without --dsn or NOETA_TEST_POSTGRES_DSN it starts a private PostgreSQL in a temporary
directory. It always exits 0; it prints tables, it is not a test.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import uuid
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import parser, server
from worker import Bench, Worker, fresh_bench, ms, spawn, table

FIRST_STEPS = "SELECT task_id, created_at FROM events WHERE task_id = ANY(%s) AND seq = 2"


async def scheduler(bench: Bench, name: str, cron: Path) -> Worker:
    env = {**os.environ, "NOETA_HOME": str(bench.scratch / "home"), "NOETA_FAILPOINTS": ""}
    command = [sys.executable, "-m", "noeta", "scheduler", "--store", bench.dsn]
    process = spawn([*command, "--cron", str(cron)], bench.scratch / f"{name}.log", env)
    bench.processes.append(process)
    log = bench.scratch / f"{name}.log"

    async def up() -> bool:
        return "scheduler: " in log.read_text()

    await bench.until(up, f"{name} starts", 60)
    return process


async def timer_delays(bench: Bench, count: int, with_scheduler: bool) -> list[float]:
    queue = f"timers-{uuid.uuid4().hex[:6]}"
    empty = bench.scratch / "empty.yaml"
    empty.write_text("schedules: []\n")
    process = await scheduler(bench, f"scheduler-{queue}", empty) if with_scheduler else None
    ids = [f"{queue}-{n}" for n in range(count)]
    async with bench.workers([f"w-{queue}"], queue, poll=30.0):
        now = await bench.store.clock()
        due = {}
        for n, task_id in enumerate(ids):  # due 1-4 s from now, spread out
            due[task_id] = now + timedelta(seconds=1 + 3 * n / max(1, count - 1))
            await bench.create([task_id], queue, bench.ok_model, ready_at=due[task_id])
        await bench.finished(queue, ids, within=120)
    if process is not None:
        await bench.stop(process)
    rows = await bench.rows(FIRST_STEPS, (ids,))
    return [(first - due[task_id]).total_seconds() for task_id, first in rows]


async def timer_table(bench: Bench, count: int) -> None:
    rows = []
    baseline = 0.0
    for label, with_scheduler in (("no scheduler (baseline)", False), ("scheduler", True)):
        delays = await timer_delays(bench, count, with_scheduler)
        median = statistics.median(delays)
        baseline = baseline or median
        rows.append(
            (label, str(len(delays)), ms(median), ms(max(delays)), f"{median / baseline:.4f}")
        )
    table(
        "1. due time -> first step of the task, ms (worker --poll 30; target: about 1 s)",
        ("run", "tasks", "median", "max", "ratio"),
        rows,
    )


async def catch_up(bench: Bench, slots: int, schedulers: int) -> tuple[float, int]:
    name = f"catch-{uuid.uuid4().hex[:6]}"
    cron = bench.scratch / f"{name}.yaml"
    model = bench.ok_model
    entry = {
        "name": name,
        "schedule": "* * * * *",
        "task": {"prompt": "tick", "model": model, "queue": f"{name}-q"},
        "missed": "run_all",
        "max_catch_up": slots,
        "overlap": "allow",
    }
    cron.write_text(json.dumps({"schedules": [entry]}))
    start = await bench.store.clock()
    await bench.store.cron_marks([name], start - timedelta(minutes=slots))
    processes = [await scheduler(bench, f"{name}-{n}", cron) for n in range(schedulers)]

    async def handled() -> bool:
        return len(await bench.store.cron_history(name, slots + 10)) >= slots

    await bench.until(handled, f"{slots} slots of {name} are handled", 300)
    for process in processes:
        await bench.stop(process)
    history = await bench.store.cron_history(name, slots + 10)
    first = min(record.fired_at for record in history)
    last = max(record.fired_at for record in history)
    tasks = await bench.value("SELECT count(*) FROM tasks WHERE queue = %s", (f"{name}-q",))
    rate = (len(history) - 1) / max((last - first).total_seconds(), 1e-6)
    return rate, int(tasks) - len(history)


async def catch_up_table(bench: Bench, slots: int) -> None:
    rows = []
    baseline = 0.0
    for schedulers in (1, 2):
        rate, extra = await catch_up(bench, slots, schedulers)
        baseline = baseline or rate
        check = "each once" if extra == 0 else f"{extra} EXTRA TASKS"
        rows.append((str(schedulers), f"{rate:.0f}", f"{rate / baseline:.2f}", check))
    table(
        f"2. catch-up of {slots} missed per-minute slots (run_all): slots handled per second",
        ("schedulers", "slots/s", "ratio", "fires"),
        rows,
    )


async def run(dsn: str, quick: bool) -> None:
    async with fresh_bench(dsn) as bench:
        await timer_table(bench, 5 if quick else 20)
        await catch_up_table(bench, 50 if quick else 500)


def main() -> None:
    options = parser(__doc__).parse_args()
    with server(options.dsn) as dsn:
        asyncio.run(run(dsn, options.quick))


if __name__ == "__main__":
    main()
