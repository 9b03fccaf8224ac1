"""What a worker's two lines a task cost it (`claimed task …`, `task …: done`), at each
`--log-level`: the worker's own logging set-up (the service's formatter, the scrubbing
filter) writing to a file, CPU seconds of this process over N tasks' lines, each level
as a ratio to `info`, the default. At `warning` the calls remain and write nothing.

  .venv/bin/python bench/log_lines.py [--tasks 100000]
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from worker import table  # the sibling module: bench/ is on sys.path

LEVELS = ("info", "warning")


def measure(level: str, tasks: int) -> float:
    """CPU µs a task of the two lines, in a fresh process (logging is configured once)."""
    from noeta import observability
    from noeta.cli import log_lines

    log_lines.configure(level)
    logging._srcfile = None  # as `noeta worker` sets them (noeta/cli/worker.py)
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    observability.scrub_logs()
    log = logging.getLogger("noeta.worker")
    began = time.process_time()
    for n in range(tasks):
        log.info("%s task %s (epoch %d)", "claimed", f"job-{n}", 1)
        log.info("task %s: %s", f"job-{n}", "done")
    return (time.process_time() - began) / tasks * 1e6


def main() -> None:
    arguments = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    arguments.add_argument("--tasks", type=int, default=100_000)
    arguments.add_argument("--level", choices=LEVELS, help=argparse.SUPPRESS)  # one run's
    options = arguments.parse_args()
    if options.level:
        with open(Path(tempfile.mkdtemp()) / "stderr.log", "w") as sink:
            sys.stderr = sink  # the lines go to a file, as a service's stderr often does
            print(f"{measure(options.level, options.tasks):.3f}")
        return
    runs: dict[str, list[float]] = {level: [] for level in LEVELS}
    for _ in range(3):  # alternated: the machine's speed moves
        for level in LEVELS:
            command = [sys.executable, __file__, "--level", level, "--tasks", str(options.tasks)]
            out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            runs[level].append(float(out))
    base = sorted(runs["info"])[1]
    rows = []
    for level in LEVELS:
        median = sorted(runs[level])[1]
        shown = ", ".join(f"{v:.2f}" for v in runs[level])
        rows.append([level, f"{median:.2f}", shown, f"{median / base:.3f}"])
    table(
        f"A worker's two lines a task, {options.tasks:,} tasks, CPU µs a task (median of 3)",
        ["--log-level", "µs a task", "runs", "÷ info"],
        rows,
    )


if __name__ == "__main__":
    main()
