"""Benchmark the `noeta` command's start: how long each command takes, end to end, as a
shell runs it, beside `python -c pass` (the interpreter's own start) and its target.

Each figure is the median of N runs of the real `noeta` executable (the console script
beside this Python), a fresh process every time: its wall time (what the target is about)
and its CPU time (user + system, which a busy machine moves far less):
- `noeta --help` (target 150 ms), `noeta --version` (it opens the store to read its
  schema version), and `noeta <command> --help` for every command;
- `noeta submit` and `noeta tasks` against a running store (target 300 ms each): a
  migrated schema of its own on the server, so each submit really creates a task (in a
  queue no worker serves).

Import times (the cause of most of a start) are printed by
`python -X importtime -c "import noeta.cli.main"`; tests/cli/test_cli_imports.py keeps
the heavy modules out of the commands that do not use them.

Run:  .venv/bin/python bench/cli.py [--dsn DSN] [--quick] [--runs N]
Without --dsn or NOETA_TEST_POSTGRES_DSN it starts a private PostgreSQL in a temporary
directory. It always exits 0; it prints tables, it is not a test.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import fresh_schema, parser, server
from worker import table, verdict

from noeta.cli import command_table

HELP_TARGET_MS, STORE_TARGET_MS = 150.0, 300.0
# Every command the lazy table lists (reading the table imports no command module).
COMMANDS = tuple(sorted(command_table.COMMANDS))


def noeta_command() -> list[str]:
    """The installed `noeta` script beside this interpreter, as a user runs it."""
    script = Path(sys.executable).parent / "noeta"
    return [str(script)] if script.exists() else [sys.executable, "-m", "noeta"]


@dataclass(frozen=True)
class Figure:
    """Medians over the runs, in ms: wall time (what a person waits) and the process's
    CPU time (user + system; less moved by a busy machine than the wall time)."""

    wall: float
    cpu: float


def measure_runs(argv: Sequence[str], runs: int, env: dict[str, str]) -> Figure:
    """`runs` fresh processes of `argv`, each of which must exit 0."""
    walls, cpus = [], []
    for _ in range(runs):
        started = time.perf_counter()
        process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(process.pid, 0)
        walls.append(time.perf_counter() - started)
        cpus.append(usage.ru_utime + usage.ru_stime)
        process.returncode = os.waitstatus_to_exitcode(status)
        error = process.stderr.read() if process.stderr else b""
        if process.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} exited {process.returncode}: {error!r}")
    return Figure(statistics.median(walls) * 1e3, statistics.median(cpus) * 1e3)


def row(name: str, figure: Figure, baseline: Figure, target: float | None) -> list[str]:
    shown = [name, f"{figure.wall:.0f}", f"{figure.wall - baseline.wall:+.0f}", f"{figure.cpu:.0f}"]
    if target is None:
        return [*shown, "-", ""]
    return [*shown, f"{target:.0f}", verdict(figure.wall <= target)]


async def measure(url: str, runs: int) -> None:
    noeta = noeta_command()
    home = tempfile.mkdtemp(prefix="noeta-bench-cli-")
    # NOETA_HOME points nowhere shared: no command here may start the user's embedded server.
    env = {**os.environ, "NOETA_HOME": home, "NOETA_STORE": url}
    env.pop("OTEL_TRACES_EXPORTER", None)
    baseline = measure_runs([sys.executable, "-c", "pass"], runs, env)
    queue = f"bench-cli-{uuid.uuid4().hex[:6]}"
    submit = [*noeta, "submit", "--queue", queue, "--model", "scripted:none.yaml", "hello"]
    tasks = [*noeta, "tasks", "--queue", queue, "--limit", "20"]
    measured: list[tuple[str, list[str], float | None]] = [
        ("python -c pass", [sys.executable, "-c", "pass"], None),
        ("noeta --help", [*noeta, "--help"], HELP_TARGET_MS),
        ("noeta --version", [*noeta, "--version"], None),
        ("noeta submit", submit, STORE_TARGET_MS),
        ("noeta tasks", tasks, STORE_TARGET_MS),
        *((f"noeta {c} --help", [*noeta, c, "--help"], HELP_TARGET_MS) for c in COMMANDS),
    ]
    rows = [
        row(
            name,
            baseline
            if aim is None and name.startswith("python")
            else measure_runs(argv, runs, env),
            baseline,
            aim,
        )
        for name, argv, aim in measured
    ]
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    title = f"noeta's start, median of {runs} runs in ms (load {load} after)"
    table(title, ["command", "wall", "vs python", "cpu", "target", ""], rows)


async def main() -> None:
    options = parser(__doc__)
    options.add_argument("--runs", type=int, default=None, help="runs per figure (15; --quick 3)")
    arguments = options.parse_args()
    runs = arguments.runs or (3 if arguments.quick else 15)
    with server(arguments.dsn) as dsn:
        async with fresh_schema(dsn) as (url, _):
            await measure(url, runs)


if __name__ == "__main__":
    asyncio.run(main())
