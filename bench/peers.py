"""Compare noeta with Procrastinate, PgQueuer and DBOS on the same PostgreSQL, in rounds.

Per round, for each system (the order rotates each round): reset its database; drain N
no-op jobs enqueued up front with 1 (and, unless --quick, 2) worker processes (noeta: a
one-shot scripted task, 2 fenced appends of 5 events; its real `noeta worker`
--concurrency 8); the same drain with a backlog of B jobs due in a day inserted first;
and idle pickup (enqueue one job, wait for its start, pause 20-500 ms, repeat).
Rate = (jobs - 1) / (last start - first start); a noeta job starts at its first durable
step (PluginsPinned, read from its log). During every drain the CPU of the workers and of
the whole PostgreSQL server (/proc) is sampled against the machine's: `other` is the cores
that anything else used meanwhile; a run with other > 0.25 cores is flagged noisy and left
out of the medians while a quiet run of the same kind exists.

The peers run under their own venv (never noeta's dependencies): `make bench-peers`
creates .venv-peers (pip install procrastinate pgqueuer dbos asyncpg) and runs this file.
Their adapters are bench/peer_adapters.py, noeta's bench/peer_noeta.py, ported from the
perf-anchor harness of shared/peers-bench.

Run:  make bench-peers [ARGS=--quick]   or   .venv/bin/python bench/peers.py [--quick]
      [--dsn DSN] [--rounds R] [--peers noeta,procrastinate,pgqueuer,dbos]
Without --dsn or NOETA_TEST_POSTGRES_DSN: a private embedded PostgreSQL (fsync on).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
from common import parser, server
from peer_cpu import CpuWindow, postmaster_of
from worker import ms, table

HERE = Path(__file__).resolve().parent
PEERS_PYTHON = HERE.parent / ".venv-peers" / "bin" / "python"
ALL = ("noeta", "procrastinate", "pgqueuer", "dbos")
DATABASE = {"noeta": "peers_noeta", "procrastinate": "peers_procrastinate"}
DATABASE |= {"pgqueuer": "peers_pgqueuer", "dbos": "peers_dbos"}
CONCURRENCY = {"noeta": 8, "procrastinate": 10, "pgqueuer": 0, "dbos": 0}  # 0: its default
DONE = {
    "noeta": "SELECT count(*) FROM tasks WHERE status = 'done'",
    "procrastinate": "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'",
    "pgqueuer": "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'",
    "dbos": "SELECT count(*) FROM dbos.workflow_status WHERE status = 'SUCCESS'"
    " AND name = 'noop_wf'",
}
NOETA_STARTS = """
SELECT extract(epoch FROM created_at)::float8 FROM events WHERE type = 'PluginsPinned'
"""
VERSIONS = """import importlib.metadata as m
print("; ".join(f"{p} {m.version(p)}" for p in ("procrastinate", "pgqueuer", "dbos")))"""
NOISY = 0.25  # cores used by anything else during a run


@dataclass(frozen=True)
class Sizes:
    jobs: int
    backlog: int
    pickups: int
    rounds: int
    processes: tuple[int, ...]


FULL = Sizes(5000, 200_000, 50, 3, (1, 2))
QUICK = Sizes(1000, 20_000, 15, 1, (1,))


@dataclass
class Result:
    peer: str
    kind: str  # "drain 1", "drain 2", "backlog 1", "pickup"
    values: list[float]  # a rate (one value) or pickup milliseconds
    other: float | None
    load: float
    wal: float | None = None  # WAL bytes per job over the drain
    commits: float | None = None  # transactions committed in the database per job

    @property
    def noisy(self) -> bool:
        return self.other is not None and self.other > NOISY


class Peers:
    """The server, one database per system, the processes started (stopped by PID)."""

    def __init__(self, dsn: str, peers_python: Path) -> None:
        self.dsn, self.peers_python = dsn, peers_python
        self.scratch = Path(tempfile.mkdtemp(prefix="noeta-bench-peers-"))
        self.started: list[subprocess.Popen[bytes]] = []
        with psycopg.connect(dsn, autocommit=True) as admin:
            have = {row[0] for row in admin.execute("SELECT datname FROM pg_database")}
            for name in DATABASE.values():
                if name not in have and name != DATABASE["dbos"]:  # DBOS makes its own
                    admin.execute(f'CREATE DATABASE "{name}"')
            backend = admin.execute("SELECT pg_backend_pid()").fetchone()
            self.postmaster = postmaster_of(int(backend[0])) if backend else None

    def url(self, peer: str) -> str:
        parts = psycopg.conninfo.conninfo_to_dict(self.dsn)
        user = quote(str(parts.get("user", "postgres")), safe="")
        secret = f":{quote(str(parts['password']), safe='')}" if parts.get("password") else ""
        host, port = parts.get("host", "127.0.0.1"), parts.get("port", 5432)
        return f"postgresql://{user}{secret}@{host}:{port}/{DATABASE[peer]}"

    def env(self, peer: str) -> dict[str, str]:
        home = str(self.scratch / "noeta-home")
        extra = {"PEER_URL": self.url(peer), "NOETA_HOME": home, "NOETA_FAILPOINTS": ""}
        return {**{k: v for k, v in os.environ.items() if k != "NOETA_CONFIG"}, **extra}

    def python(self, peer: str) -> str:
        return sys.executable if peer == "noeta" else str(self.peers_python)

    def step(self, peer: str, *args: str, timeout: float = 600) -> Any:
        command = [self.python(peer), str(HERE / "peer_adapters.py"), *args, "--peer", peer]
        done = subprocess.run(
            command, env=self.env(peer), capture_output=True, timeout=timeout, check=False
        )
        out = done.stdout.decode(errors="replace")
        if done.returncode != 0:
            tail = done.stderr.decode(errors="replace").strip().splitlines()[-3:]
            raise RuntimeError(f"{peer} {args[0]} failed: {' | '.join(tail)}")
        found = [line[7:] for line in out.splitlines() if line.startswith("RESULT ")]
        return json.loads(found[-1]) if found else None

    def worker(self, peer: str, index: int, record: Path) -> subprocess.Popen[bytes]:
        if peer == "noeta":
            command = [sys.executable, "-m", "noeta", "worker", "--store", self.url(peer)]
            command += ["--queues", "bench", "--concurrency", str(CONCURRENCY[peer])]
            command += ["--name", f"w{index}"]
        else:
            command = [self.python(peer), str(HERE / "peer_adapters.py"), "worker"]
            command += ["--peer", peer, "--concurrency", str(CONCURRENCY[peer])]
            command += ["--index", str(index), "--record", str(record)]
        log = record.with_suffix(".log")
        with log.open("ab") as output:
            process = subprocess.Popen(
                command, env=self.env(peer), stdout=output, stderr=subprocess.STDOUT
            )
        self.started.append(process)
        return process

    def stop(self, processes: Sequence[subprocess.Popen[bytes]]) -> None:
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)

    def starts(self, peer: str, records: Sequence[Path]) -> list[float]:
        if peer == "noeta":
            with psycopg.connect(self.url(peer), autocommit=True) as connection:
                return [row[0] for row in connection.execute(NOETA_STARTS)]
        found: list[float] = []
        for record in records:
            if record.exists():
                found += [float(line.split()[1]) for line in record.read_text().splitlines()]
        return found

    def drain(self, peer: str, sizes: Sizes, processes: int, backlog: int) -> Result:
        self.step(peer, "reset")
        if backlog:
            self.step(peer, "enqueue", "--n", str(backlog), "--future")
        self.step(peer, "enqueue", "--n", str(sizes.jobs))
        records = [self.scratch / f"{peer}-{time.time_ns()}-{i}.rec" for i in range(processes)]
        load = os.getloadavg()[0]
        with psycopg.connect(self.url(peer), autocommit=True) as poll:
            wal, commits = counters(poll)
            workers = [self.worker(peer, i, record) for i, record in enumerate(records)]
            window = CpuWindow([w.pid for w in workers], self.postmaster)
            try:
                deadline = time.monotonic() + 300
                while time.monotonic() < deadline:
                    row = poll.execute(DONE[peer]).fetchone()
                    window.sample(int(row[0]) if row else 0)
                    if window.done >= sizes.jobs or any(w.poll() is not None for w in workers):
                        break
                    time.sleep(0.05)
            finally:
                self.stop(workers)
            time.sleep(1)  # the workers' backends report their commits as they exit
            wal_after, commits_after = counters(poll)
        if window.done < sizes.jobs:
            raise RuntimeError(f"{peer}: {window.done} of {sizes.jobs} jobs done")
        starts = sorted(self.starts(peer, records))
        rate = (len(starts) - 1) / (starts[-1] - starts[0])
        kind = f"{'backlog' if backlog else 'drain'} {processes}"
        per_job = (wal_after - wal) / window.done, (commits_after - commits) / window.done
        return Result(peer, kind, [rate], window.other_cores(sizes.jobs), load, *per_job)

    def pickup(self, peer: str, sizes: Sizes) -> Result:
        self.step(peer, "reset")
        record = self.scratch / f"{peer}-{time.time_ns()}-pickup.rec"
        load = os.getloadavg()[0]
        worker = self.worker(peer, 0, record)
        try:
            # noeta's probe tails its worker's log; the others' record file
            tail = str(record.with_suffix(".log") if peer == "noeta" else record)
            self.step(peer, "probe", "--n", "3", "--record", tail)  # warm-up, and ready
            window = CpuWindow([worker.pid], self.postmaster)
            window.sample(0)
            found = self.step(peer, "probe", "--n", str(sizes.pickups), "--record", tail)
            window.sample(sizes.pickups)
        finally:
            self.stop([worker])
        other = window.other_cores(sizes.pickups)
        return Result(peer, "pickup", found["pickup_ms"], other, load)


WAL_AND_COMMITS = """
SELECT pg_current_wal_lsn() - '0/0'::pg_lsn, xact_commit
  FROM pg_stat_database WHERE datname = current_database()
"""


def counters(connection: psycopg.Connection[Any]) -> tuple[float, float]:
    """WAL bytes written so far (the whole server) and this database's commits."""
    connection.execute("SELECT pg_stat_force_next_flush()")
    row = connection.execute(WAL_AND_COMMITS).fetchone()
    return (float(row[0]), float(row[1])) if row else (0.0, 0.0)


def rounds(peers: Peers, sizes: Sizes, names: Sequence[str], count: int) -> Iterator[Result]:
    for number in range(count):
        order = [*names[number % len(names) :], *names[: number % len(names)]]
        print(f"round {number + 1}: {', '.join(order)}; load {load()}", flush=True)
        for peer in order:
            try:
                for processes in sizes.processes:
                    yield peers.drain(peer, sizes, processes, 0)
                yield peers.drain(peer, sizes, 1, sizes.backlog)
                yield peers.pickup(peer, sizes)
            except Exception as error:  # a benchmark reports a failure and goes on
                print(f"  {peer}: FAILED: {error}", flush=True)
            finally:
                peers.stop(peers.started)


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def chosen(results: Sequence[Result], peer: str, kind: str) -> list[Result]:
    """The quiet runs of a kind, or all of them when none was quiet."""
    runs = [r for r in results if r.peer == peer and r.kind == kind]
    return [r for r in runs if not r.noisy] or runs


def median_rate(results: Sequence[Result], peer: str, kind: str) -> float | None:
    runs = chosen(results, peer, kind)
    return statistics.median(r.values[0] for r in runs) if runs else None


def report(results: Sequence[Result], sizes: Sizes, names: Sequence[str]) -> None:
    rows = []
    for r in results:
        shown = f"{r.values[0]:,.0f}/s" if r.kind != "pickup" else ms(median_ms(r.values) / 1e3)
        other = "" if r.other is None else f"{r.other:.2f}"
        wal = "" if r.wal is None else f"{r.wal / 1024:.1f}"
        commits = "" if r.commits is None else f"{r.commits:.2f}"
        row = [r.peer, r.kind, shown, wal, commits, other, f"{r.load:.2f}"]
        rows.append([*row, "noisy" if r.noisy else ""])
    table(
        "Runs (other: cores used by anything else)",
        ["system", "run", "value", "WAL KiB/job", "commits/job", "other", "load1", ""],
        rows,
    )
    kinds = [f"drain {p}" for p in sizes.processes]
    headers = ["system", *[f"{k} jobs/s" for k in kinds], "backlog ÷ empty", "pickup ms", "p99"]
    rows, summary = [], {}
    for peer in names:
        rates = [median_rate(results, peer, k) for k in kinds]
        backlog, empty = median_rate(results, peer, "backlog 1"), rates[0]
        ratio = backlog / empty if backlog and empty else None
        picks = [v for r in chosen(results, peer, "pickup") for v in r.values]
        pick = (median_ms(picks), p99(picks)) if len(picks) > 1 else None
        summary[peer] = (rates, pick)
        row = [peer, *[f"{r:,.0f}" if r else "-" for r in rates]]
        row += [f"{ratio:.2f}" if ratio else "-"]
        rows.append(row + ([f"{pick[0]:.2f}", f"{pick[1]:.1f}"] if pick else ["-", "-"]))
    if "noeta" in summary:
        mine, my_pick = summary["noeta"]
        for peer in names:
            rates, pick = summary[peer]
            if peer == "noeta":
                continue
            row = [f"noeta ÷ {peer}"]
            row += [f"{a / b:.2f}" if a and b else "-" for a, b in zip(mine, rates, strict=True)]
            row += ["", f"{my_pick[0] / pick[0]:.2f}" if my_pick and pick else "-", ""]
            rows.append(row)
    title = (
        f"Medians of the quiet runs (of all runs of a kind if none was quiet):"
        f" {sizes.jobs:,} no-op jobs, backlog {sizes.backlog:,} due in"
        f" a day, {sizes.pickups} pickups a round; load {load()}"
    )
    table(title, headers, rows)


def median_ms(values: Sequence[float]) -> float:
    return statistics.median(values)


def p99(values: Sequence[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def main() -> None:
    made = parser(__doc__)
    made.add_argument("--rounds", type=int, help="rounds (default 3, --quick 1)")
    made.add_argument("--peers", default=",".join(ALL), help="comma-separated systems")
    made.add_argument("--peers-python", type=Path, default=PEERS_PYTHON)
    options = made.parse_args()
    names = [n.strip() for n in options.peers.split(",") if n.strip()]
    if unknown := set(names) - set(ALL):
        sys.exit(f"unknown system(s): {', '.join(sorted(unknown))} (choose from {', '.join(ALL)})")
    if set(names) - {"noeta"} and not options.peers_python.exists():
        sys.exit(f"no {options.peers_python}: run `make bench-peers` (it creates it)")
    sizes = QUICK if options.quick else FULL
    if set(names) - {"noeta"}:
        versions = [str(options.peers_python), "-c", VERSIONS]
        print(subprocess.run(versions, capture_output=True, text=True, check=False).stdout.strip())
    with server(options.dsn) as dsn:
        peers = Peers(dsn, options.peers_python)
        try:
            results = list(rounds(peers, sizes, names, options.rounds or sizes.rounds))
        finally:
            peers.stop(peers.started)
            shutil.rmtree(peers.scratch, ignore_errors=True)
    report(results, sizes, names)


if __name__ == "__main__":
    main()
