"""bench/worker.py's "renewal" section: how soon a fresh worker's first renewal follows
its first claim, on a machine kept busy by a CPU burner (issue 26, item 5).

Each run creates `--concurrency` tasks due now (a Bash `sleep` each, so they stay
claimed), starts one burner process per core (each ends by itself after BURN_SECONDS,
and is killed at the end anyway), then a new worker. A claim sets `lease_until` to its
moment plus the lease, and so does every renewal: the bench reads the rows until each
task's `lease_until` has moved once, and the first claim's delay to its first renewal is
the difference of the two values (the database clock's, not the poll's). A delay at or
past the lease is a claim that lapsed unrenewed.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # worker.py runs as __main__: its types only, never the module again
    from worker import Bench, Sizes

LEASE = 3.0  # seconds: the renewer's round is a third of it
BURN_SECONDS = 60  # a burner's own bound: it stops even if the bench is killed
BURN = """import sys, time
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    pass"""
LEASES = "SELECT id, lease_until FROM tasks WHERE queue = %s AND lease_until IS NOT NULL"


def burners() -> list[subprocess.Popen[bytes]]:
    cores = os.cpu_count() or 2
    return [subprocess.Popen([sys.executable, "-c", BURN, str(BURN_SECONDS)]) for _ in range(cores)]


async def first_renewal_once(bench: Bench, repeat: int, concurrency: int, model: str) -> float:
    """Seconds from the first claim of a fresh worker to that task's first renewal."""
    queue = f"fresh-{repeat}"
    ids = [f"{queue}-{n}" for n in range(concurrency)]
    await bench.create(ids, queue, model, tools=("Bash",))
    seen: dict[str, list[datetime]] = {task_id: [] for task_id in ids}
    burning = burners()
    try:
        async with bench.workers([f"fresh{repeat}"], queue, concurrency=concurrency, lease=LEASE):

            async def renewed_once() -> bool:
                for task_id, lease_until in await bench.rows(LEASES, (queue,)):
                    if lease_until not in seen[task_id]:
                        seen[task_id].append(lease_until)
                first = min((s[0], t) for t, s in seen.items() if s) if any(seen.values()) else None
                return first is not None and len(seen[first[1]]) >= 2

            await bench.until(renewed_once, "the first claim is renewed", 60)
    finally:
        for burner in burning:
            burner.kill()
            burner.wait(10)
    claimed_at, task_id = min((s[0], t) for t, s in seen.items() if s)
    return (seen[task_id][1] - claimed_at).total_seconds()


async def first_renewal_figures(bench: Bench, sizes: Sizes) -> tuple[str, list[str], list[str]]:
    """The section's title, headers and row, for worker.py's `table`."""
    sleepy = {"tool_calls": [{"id": "c1", "name": "Bash", "input": {"command": "sleep 20"}}]}
    model = bench.script("sleepy-fresh", [sleepy, {"text": "done"}])
    concurrency = max(sizes.concurrency)
    delays = []
    for repeat in range(sizes.renewals):
        started = time.monotonic()
        delay = await first_renewal_once(bench, repeat, concurrency, model)
        delays.append(delay)
        print(
            f"  fresh worker {repeat + 1}: first renewal {delay:.3f} s after its first claim"
            f" (run {time.monotonic() - started:.1f} s, load {os.getloadavg()[0]:.1f})",
            flush=True,
        )
    lapsed = sum(delay >= LEASE for delay in delays)
    target = LEASE / 2
    ok = max(delays) < target and not lapsed
    row = [f"{LEASE:g}", str(concurrency), f"{statistics.median(delays):.3f}"]
    row += [f"{max(delays):.3f}", str(lapsed), f"<{target:g} s  {'PASS' if ok else 'MISS'}"]
    headers = ["lease s", "claimed", "median s", "max s", "lapsed", "target"]
    title = (
        "Fresh worker under a CPU burner (one per core): first claim to its first renewal,"
        f" {len(delays)} runs"
    )
    return title, headers, row
