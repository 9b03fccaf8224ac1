"""Benchmark the `noeta` command's start: how long each command takes, end to end, as a
shell runs it, beside `python -c pass` (the interpreter's own start) and its target.

Each figure is the median wall time of N runs of the real `noeta` executable (the
console script beside this Python), a fresh process every time:
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import fresh_schema, parser, server
from worker import table, verdict

HELP_TARGET_MS, STORE_TARGET_MS = 150.0, 300.0
COMMANDS = (
    "answer",
    "cancel",
    "cron",
    "db",
    "run",
    "scheduler",
    "send",
    "show",
    "submit",
    "tail",
    "tasks",
    "worker",
)


def noeta_command() -> list[str]:
    """The installed `noeta` script beside this interpreter, as a user runs it."""
    script = Path(sys.executable).parent / "noeta"
    return [str(script)] if script.exists() else [sys.executable, "-m", "noeta"]


def median_ms(argv: Sequence[str], runs: int, env: dict[str, str]) -> float:
    """The median wall time of `runs` fresh processes of `argv`, each of which must exit 0."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, check=False)
        times.append(time.perf_counter() - started)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr!r}")
    return statistics.median(times) * 1e3


def row(name: str, figure: float, baseline: float, target: float | None) -> list[str]:
    over = figure - baseline
    if target is None:
        return [name, f"{figure:.0f}", f"{over:+.0f}", "-", ""]
    return [name, f"{figure:.0f}", f"{over:+.0f}", f"{target:.0f}", verdict(figure <= target)]


async def measure(url: str, runs: int) -> None:
    noeta = noeta_command()
    home = tempfile.mkdtemp(prefix="noeta-bench-cli-")
    # NOETA_HOME points nowhere shared: no command here may start the user's embedded server.
    env = {**os.environ, "NOETA_HOME": home, "NOETA_STORE": url}
    env.pop("OTEL_TRACES_EXPORTER", None)
    baseline = median_ms([sys.executable, "-c", "pass"], runs, env)
    queue = f"bench-cli-{uuid.uuid4().hex[:6]}"
    rows = [["python -c pass", f"{baseline:.0f}", "+0", "-", ""]]
    rows.append(row("noeta --help", median_ms([*noeta, "--help"], runs, env), baseline, 150))
    rows.append(row("noeta --version", median_ms([*noeta, "--version"], runs, env), baseline, None))
    submit = [*noeta, "submit", "--queue", queue, "--model", "scripted:none.yaml", "hello"]
    rows.append(row("noeta submit", median_ms(submit, runs, env), baseline, STORE_TARGET_MS))
    tasks = [*noeta, "tasks", "--queue", queue, "--limit", "20"]
    rows.append(row("noeta tasks", median_ms(tasks, runs, env), baseline, STORE_TARGET_MS))
    for command in COMMANDS:
        figure = median_ms([*noeta, command, "--help"], runs, env)
        rows.append(row(f"noeta {command} --help", figure, baseline, HELP_TARGET_MS))
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    title = f"noeta's start, median of {runs} runs (ms; load {load} after)"
    table(title, ["command", "median", "vs python", "target", ""], rows)


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
