"""Benchmark Bash's confinement: `true` through the Bash tool, per mode.

Modes, interleaved in one run so the machine's load weighs on each alike:
- unconfined: `confine: off`, the fork and exec as before (Popen may use vfork);
- landlock: Landlock alone, entered between fork and exec (a machine without namespaces);
- namespaces, network none: bubblewrap's namespaces, the Python init, Landlock inside;
- namespaces, network proxy (the default): the same, plus the proxy's socket handed over
  and served for the call.
The baseline is the unconfined mode of the same run; ratios are against it.

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

from noeta.core.ports.tool import ToolContext
from noeta.plugins.core import Bash
from noeta.plugins.core.confinement import Confinement
from noeta.plugins.core.landlock import Availability, kernel_availability
from noeta.plugins.core.sandbox import Bubblewrap, bubblewrap

NO_NAMESPACES = Availability(0, "benchmark: Landlock alone")


async def main(calls: int) -> None:
    available, wrap = kernel_availability(), bubblewrap()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    namespaces = "bubblewrap" if isinstance(wrap, Bubblewrap) else wrap.reason
    print(f"{available.reason}; {namespaces}; {os.cpu_count()} CPUs; load {load}; {calls} calls")
    with tempfile.TemporaryDirectory(prefix="noeta-bench-confine-") as workspace:
        ctx = ToolContext("bench", "call", workspace=workspace)
        tools = {"unconfined": Bash(confinement=Confinement("off"))}
        if available.abi:
            tools["landlock"] = Bash(confinement=Confinement(wrap=lambda: NO_NAMESPACES))
        if isinstance(wrap, Bubblewrap):
            tools["namespaces, none"] = Bash(confinement=Confinement(network="none"))
            tools["namespaces, proxy"] = Bash(confinement=Confinement(network="proxy"))

        def call_of(tool: Bash) -> Callable[[], Awaitable[object]]:
            return lambda: tool.run({"command": "true"}, ctx)

        modes = {name: call_of(tool) for name, tool in tools.items()}
        timings: dict[str, list[float]] = {name: [] for name in modes}
        for _ in range(calls):
            for name, call in modes.items():
                started = time.perf_counter()
                await call()
                timings[name].append((time.perf_counter() - started) * 1000)
    baseline = statistics.median(timings["unconfined"])
    print(f"{'mode':<20}{'median ms':>11}{'p95 ms':>9}{'min ms':>9}{'ratio':>8}")
    for name, times in timings.items():
        times.sort()
        p95 = times[int(len(times) * 0.95) - 1]
        median = statistics.median(times)
        print(f"{name:<20}{median:>11.2f}{p95:>9.2f}{times[0]:>9.2f}{median / baseline:>8.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    asyncio.run(main(parser.parse_args().calls))
