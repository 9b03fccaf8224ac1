"""Benchmark Bash's confinement: `true` through the Bash tool, unconfined and under Landlock.

Modes, interleaved in one run so the machine's load weighs on each alike:
- unconfined: `confine: off`, the fork and exec as before (Popen may use vfork);
- confined: the ruleset built in the parent (O_PATH handles, one rule each), then
  fork, no_new_privs and landlock_restrict_self in the child, then exec;
- ruleset only: building and closing the ruleset, with no process at all.

Run:  .venv/bin/python bench/confinement.py [--calls N]
It prints a table and exits 0: it is a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable

from noeta.core.tool import ToolContext
from noeta.plugins.core import Bash
from noeta.plugins.core.confinement import Confinement
from noeta.plugins.core.landlock import kernel_availability


async def main(calls: int) -> None:
    available = kernel_availability()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{available.reason}; {os.cpu_count()} CPUs; load {load}; {calls} calls per mode")
    if not available.abi:
        print("Landlock is unavailable here: nothing to compare")
        return
    with tempfile.TemporaryDirectory(prefix="noeta-bench-confine-") as workspace:
        ctx = ToolContext("bench", "call", workspace=workspace)
        unconfined = Bash(confinement=Confinement("off"))
        confined = Bash(confinement=Confinement("required"))

        async def ruleset_only() -> None:
            with confined.confinement.entry(workspace):
                pass

        modes: dict[str, Callable[[], Awaitable[object]]] = {
            "unconfined": lambda: unconfined.run({"command": "true"}, ctx),
            "confined": lambda: confined.run({"command": "true"}, ctx),
            "ruleset only": ruleset_only,
        }
        timings: dict[str, list[float]] = {name: [] for name in modes}
        for _ in range(calls):
            for name, call in modes.items():
                started = time.perf_counter()
                await call()
                timings[name].append((time.perf_counter() - started) * 1000)
    print(f"{'mode':<14}{'median ms':>11}{'p95 ms':>9}{'min ms':>9}")
    for name, times in timings.items():
        times.sort()
        p95 = times[int(len(times) * 0.95) - 1]
        print(f"{name:<14}{statistics.median(times):>11.2f}{p95:>9.2f}{times[0]:>9.2f}")
    overhead = statistics.median(timings["confined"]) - statistics.median(timings["unconfined"])
    print(f"confinement adds {overhead:.2f} ms per command (median)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    asyncio.run(main(parser.parse_args().calls))
