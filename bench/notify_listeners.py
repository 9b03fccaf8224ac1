"""What one NOTIFY costs beside idle listeners on other channels (issue 28 item 4).

PostgreSQL signals every backend that listens in the notifying database, whatever its
channels; each wakes, reads the notification queue and finds nothing for itself. An idle
noeta worker listens on a connection of its own (ADR-0087), so a create that calls one
idle worker wakes the backend of every listener in the database. This prints, for 0 and
for N listeners on channels nobody notifies: the notifying statement's wall time (its
commit, autocommit) and the CPU all the database's backends spent a notification
(`/proc/PID/schedstat`: the server must be local), in rounds, with the ratio to no
listener in the same round.

    .venv/bin/python bench/notify_listeners.py [--listeners 50] [--rounds 3]
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

import psycopg
from common import parser, server
from worker import table

NOTIFIES = 300
PACE = 0.002  # seconds between notifications: every woken backend back asleep
BACKENDS = "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"


def backends_cpu(watch: psycopg.Connection[Any]) -> int:
    """Nanoseconds of CPU the database's backends have run, from /proc."""
    total = 0
    for (pid,) in watch.execute(BACKENDS).fetchall():
        try:
            total += int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
        except OSError:
            continue  # it ended
    return total


def notifications(dsn: str, listeners: int) -> tuple[float, float, float]:
    """Median and p99 ms of a NOTIFY (autocommit), and the backends' CPU ms for each."""
    listening = [psycopg.connect(dsn, autocommit=True) for _ in range(listeners)]
    try:
        for index, connection in enumerate(listening):
            connection.execute(f"LISTEN idle_{index}")
        with (
            psycopg.connect(dsn, autocommit=True) as notifier,
            psycopg.connect(dsn, autocommit=True) as watch,
        ):
            times: list[float] = []
            before = backends_cpu(watch)
            for _ in range(NOTIFIES):
                start = time.perf_counter_ns()
                notifier.execute("SELECT pg_notify('nobody_listens', '')")
                times.append((time.perf_counter_ns() - start) / 1e6)
                time.sleep(PACE)
            cpu = (backends_cpu(watch) - before) / 1e6 / NOTIFIES
    finally:
        for connection in listening:
            connection.close()
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.99) - 1], cpu


def main() -> None:
    options = parser(__doc__, quick=False)
    options.add_argument("--listeners", type=int, default=50)
    options.add_argument("--rounds", type=int, default=3)
    args = options.parse_args()
    rows = []
    with server(args.dsn) as dsn:
        for round_ in range(1, args.rounds + 1):
            alone = notifications(dsn, 0)
            beside = notifications(dsn, args.listeners)
            for count, (median, p99, cpu) in ((0, alone), (args.listeners, beside)):
                rows.append(
                    [
                        str(round_),
                        str(count),
                        f"{median:.2f}",
                        f"{p99:.2f}",
                        f"{cpu:.3f}",
                        f"{median / alone[0]:.1f}x",
                        f"{cpu / alone[2]:.1f}x",
                        f"{os.getloadavg()[0]:.2f}",
                    ]
                )
    table(
        f"A NOTIFY on a channel nobody listens to, {NOTIFIES} a row, beside idle listeners",
        [
            "round",
            "listeners",
            "median ms",
            "p99 ms",
            "backends' CPU ms",
            "median / 0",
            "CPU / 0",
            "load1",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
