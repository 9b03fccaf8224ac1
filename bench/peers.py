"""Compare noeta with Procrastinate, PgQueuer and DBOS on the same PostgreSQL, in rounds.

Per round, for each system (the order rotates each round): reset its database; drain N
no-op jobs enqueued up front with 1 (and, unless --quick, 2) worker processes; the same
drain with a backlog of B jobs due in a day inserted first; and idle pickup (enqueue one
job, wait for its start, pause 20-500 ms, repeat). noeta runs three times: "noeta", a one-shot
scripted agent task (2 fenced appends of 5 events; `noeta worker --concurrency 8`), which
starts at its first durable step (PluginsPinned) in a drain and at its model request in the
idle pickup (the moment its work begins; bench/agent_start/); "noeta-c32", the same task at
`--concurrency 32` (DBOS and PgQueuer run with no limit; an agent task mostly waits on its
model, so a user runs many at once); and "noeta-job", the plain no-op job
(`@noeta.tool async def`, bench/noop_job.py's noop_async; --concurrency 16), like for
like with the peers' no-op jobs (PgQueuer's and Procrastinate's are async too; a sync
function would add a thread hop a job, ADR-0118), which starts at ToolStarted; and
"noeta-job-c32", the same job at `--concurrency 32`, as the peers run theirs unlimited.
Rate = the starts while every worker process runs, over that time: from the latest of the
workers' first starts to the earliest of their last starts (one process: (jobs - 1) /
(last start - first start), as before). The workers start together with the queue full;
the one that finished importing first drains alone until the others begin (noeta's second
worker: 13-213 ms late at load 2, up to 785 ms at load 10), so a span from the very first
start measured the processes' start-up skew too, unlike for each system (ADR-0126).

During every drain the CPU of the workers' process trees and of the whole PostgreSQL
server (/proc: every backend but the bench's own poll) is sampled against the machine's,
between the polls that saw 10 % and 90 % done: CPU ms per job for each, and `other`, the
cores anything else used meanwhile (`cores`, rate times CPU a job, is the cores the
system itself kept busy); a run with other > 0.25 cores is flagged noisy and left out
of the medians while a quiet run of the same kind exists. Commits per job: the database's
xact_commit, the poll's own left out.
A drain fails when a worker exits or no job is done for STALL seconds (never on its total
time: a slow system is measured, not cut short); a failure is printed, the round goes on,
and the run exits 1 with one line naming them.

The peers run under their own venv (never noeta's dependencies): `make bench-peers`
creates .venv-peers (pip install procrastinate pgqueuer dbos asyncpg) and runs this file.
Their adapters are bench/peer_adapters.py, noeta's bench/peer_noeta.py, ported from the
perf-anchor harness of shared/peers-bench.

Run:  make bench-peers [ARGS=--quick]   or   .venv/bin/python bench/peers.py [--quick]
      [--dsn DSN] [--rounds R] [--peers noeta,procrastinate,pgqueuer,dbos]
      [--jobs N] [--drains-only]
--jobs: the jobs of each drain, for every system alike (default 5,000; --quick 1,000).
--drains-only: the drains without the backlog and the idle pickup.
Without --dsn or NOETA_TEST_POSTGRES_DSN: a private embedded PostgreSQL (fsync on).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from itertools import groupby
from operator import itemgetter
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
from common import parser, server
from peer_cpu import CpuWindow, postmaster_of
from peer_report import NOETA, NOETA_JOBS, Result, Sizes, load, report, run_line, steady_rate

HERE = Path(__file__).resolve().parent
PEERS_PYTHON = HERE.parent / ".venv-peers" / "bin" / "python"
ALL = (*NOETA, "procrastinate", "pgqueuer", "dbos")
DATABASE = {"noeta": "peers_noeta", "noeta-c32": "peers_noeta_c32", "noeta-job": "peers_noeta_job"}
DATABASE |= {"noeta-job-c32": "peers_noeta_job_c32"}
DATABASE |= {"procrastinate": "peers_procrastinate", "pgqueuer": "peers_pgqueuer"}
DATABASE |= {"dbos": "peers_dbos"}
# 0: its default. noeta-job as bench/jobs.py runs plain jobs. The -c32 rows: the same at
# --concurrency 32 (DBOS and PgQueuer run unlimited; an agent task mostly waits on its model,
# and a fleet of no-op jobs is limited by nothing but the worker's slots).
CONCURRENCY = {"noeta": 8, "noeta-c32": 32, "noeta-job": 16, "noeta-job-c32": 32}
CONCURRENCY |= {"procrastinate": 10, "pgqueuer": 0, "dbos": 0}
NOETA_DONE = "SELECT count(*) FROM tasks WHERE status = 'done'"
DONE = {
    **dict.fromkeys(NOETA, NOETA_DONE),
    "procrastinate": "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'",
    "pgqueuer": "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'",
    "dbos": "SELECT count(*) FROM dbos.workflow_status WHERE status = 'SUCCESS'"
    " AND name = 'noop_wf'",
}
# Each start with the worker that made it (the claim's owner: the worker's --name).
NOETA_STARTS = """
SELECT owner, extract(epoch FROM created_at)::float8 FROM events WHERE type = %s ORDER BY 1
"""
STARTED_BY = {p: "ToolStarted" if p in NOETA_JOBS else "PluginsPinned" for p in NOETA}
VERSIONS = """import importlib.metadata as m
print("; ".join(f"{p} {m.version(p)}" for p in ("procrastinate", "pgqueuer", "dbos")))"""
STALL = 120.0  # seconds without a job done before a drain is called failed
POLL = 0.05


FULL = Sizes(5000, 200_000, 50, 3, (1, 2))
QUICK = Sizes(1000, 20_000, 15, 1, (1,))


class Peers:
    """The server, one database per system, the processes started (stopped by PID)."""

    def __init__(self, dsn: str, peers_python: Path) -> None:
        self.dsn, self.peers_python = dsn, peers_python
        self.scratch = Path(tempfile.mkdtemp(prefix="noeta-bench-peers-"))
        self.started: list[subprocess.Popen[bytes]] = []
        self.jobs_config = self.scratch / "jobs.yaml"
        self.jobs_config.write_text("plugins:\n  - module: noop_job\n")
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
        if peer in NOETA:
            extra["NOETA_STORE"] = self.url(peer)
        if peer in NOETA_JOBS:  # its worker loads the no-op job's module as a plugin
            path = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
            extra |= {"NOETA_CONFIG": str(self.jobs_config), "PYTHONPATH": path}
        return {**{k: v for k, v in os.environ.items() if k != "NOETA_CONFIG"}, **extra}

    def python(self, peer: str) -> str:
        return sys.executable if peer in NOETA else str(self.peers_python)

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

    def worker(
        self, peer: str, index: int, record: Path, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        if peer in NOETA:
            # The URL (its password) in the environment: never on a command line.
            command = [sys.executable, "-m", "noeta", "worker"]
            command += ["--queues", "bench", "--concurrency", str(CONCURRENCY[peer])]
            command += ["--name", f"w{index}"]
        else:
            command = [self.python(peer), str(HERE / "peer_adapters.py"), "worker"]
            command += ["--peer", peer, "--concurrency", str(CONCURRENCY[peer])]
            command += ["--index", str(index), "--record", str(record)]
        log = record.with_suffix(".log")
        with log.open("ab") as output:
            # PYTHONSAFEPATH: `-m` must not put the working directory ahead of
            # PYTHONPATH (a run of another checkout would start this tree's workers).
            process = subprocess.Popen(
                command,
                env={**self.env(peer), **(env or {}), "PYTHONSAFEPATH": "1"},
                stdout=output,
                stderr=subprocess.STDOUT,
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

    def starts(self, peer: str, records: Sequence[Path]) -> list[list[float]]:
        """The jobs' start times, one list per worker process."""
        if peer in NOETA:
            with psycopg.connect(self.url(peer), autocommit=True) as connection:
                rows = connection.execute(NOETA_STARTS, (STARTED_BY[peer],)).fetchall()
            return [[at for _, at in group] for _, group in groupby(rows, itemgetter(0))]
        return [
            [float(line.split()[1]) for line in record.read_text().splitlines()]
            for record in records
            if record.exists()
        ]

    def drain(self, peer: str, sizes: Sizes, processes: int, backlog: int) -> Result:
        self.step(peer, "reset")
        if backlog:
            self.step(peer, "enqueue", "--n", str(backlog), "--future")
        self.step(peer, "enqueue", "--n", str(sizes.jobs))
        records = [self.scratch / f"{peer}-{time.time_ns()}-{i}.rec" for i in range(processes)]
        load = os.getloadavg()[0]
        kind = f"{'backlog' if backlog else 'drain'} {processes}"
        with psycopg.connect(self.url(peer), autocommit=True) as poll:
            wal, commits = counters(poll)
            workers = [self.worker(peer, i, record) for i, record in enumerate(records)]
            window = CpuWindow([w.pid for w in workers], self.postmaster, poll.info.backend_pid)
            polls, exited = 0, False
            try:
                progress = time.monotonic()
                while time.monotonic() - progress < STALL:
                    asked = time.monotonic()
                    row = poll.execute(DONE[peer]).fetchone()
                    # A count that is slow (a big backlog) is asked less often: the
                    # bench's own query keeps to a small share of one core.
                    pause = max(POLL, 5 * (time.monotonic() - asked))
                    polls += 1
                    before = window.done
                    window.sample(int(row[0]) if row else 0)
                    if window.done > before:
                        progress = time.monotonic()
                    exited = any(w.poll() is not None for w in workers)
                    if window.done >= sizes.jobs or exited:
                        break
                    time.sleep(pause)
            finally:
                self.stop(workers)
            time.sleep(1)  # the workers' backends report their commits as they exit
            wal_after, commits_after = counters(poll)
        if window.done < sizes.jobs:
            why = (
                f"a worker exited: {last_line(records)}"
                if exited
                else f"none done in {STALL:.0f} s"
            )
            raise RuntimeError(f"{peer} {kind}: {window.done} of {sizes.jobs} jobs done ({why})")
        rate = steady_rate(self.starts(peer, records))
        # Each poll is a transaction of this database: not the system's.
        per_job = (wal_after - wal) / window.done, (commits_after - commits - polls) / window.done
        other, cpu = window.other_cores(sizes.jobs), window.per_job(sizes.jobs)
        return Result(peer, kind, [rate], other, load, *per_job, cpu=cpu)

    def pickup(self, peer: str, sizes: Sizes) -> Result:
        self.step(peer, "reset")
        record = self.scratch / f"{peer}-{time.time_ns()}-pickup.rec"
        load = os.getloadavg()[0]
        # noeta's job records its function's start, as the peers' do (bench/noop_job.py);
        # its agent task, its model request (bench/agent_start/sitecustomize.py)
        starts = {"NOETA_BENCH_STARTS": str(record)} if peer in NOETA else {}
        if peer in NOETA and peer not in NOETA_JOBS:
            path = [str(HERE / "agent_start"), self.env(peer).get("PYTHONPATH")]
            starts["PYTHONPATH"] = os.pathsep.join(filter(None, path))
        worker = self.worker(peer, 0, record, starts)
        try:
            # noeta's probe tails its worker's log; the others' record file
            tail = str(record.with_suffix(".log") if peer in NOETA else record)
            self.step(peer, "probe", "--n", "3", "--record", tail)  # warm-up, and ready
            window = CpuWindow([worker.pid], self.postmaster)
            window.sample(0)
            found = self.step(peer, "probe", "--n", str(sizes.pickups), "--record", tail)
            window.sample(sizes.pickups)
        finally:
            self.stop([worker])
        if len(found["pickup_ms"]) < sizes.pickups:
            got = f"{len(found['pickup_ms'])} of {sizes.pickups}"
            raise RuntimeError(f"{peer} pickup: {got} jobs started ({last_line([record])})")
        if first := found.get("first_step_ms"):
            step = statistics.median(first)
            print(f"  {peer} pickup: its first durable step (ToolStarted) at {step:.2f} ms")
        if pinned := found.get("pinned_ms"):
            at, p99 = statistics.median(pinned), sorted(pinned)[int(len(pinned) * 0.99)]
            print(f"  {peer} pickup: its PluginsPinned row at {at:.2f} ms (p99 {p99:.2f})")
        other, cpu = window.other_cores(sizes.pickups), window.per_job(sizes.pickups)
        return Result(peer, "pickup", found["pickup_ms"], other, load, cpu=cpu)


def last_line(records: Sequence[Path]) -> str:
    """The last line a worker logged (why it exited), to name in the failure."""
    for record in records:
        log = record.with_suffix(".log")
        if log.exists() and (lines := log.read_text(errors="replace").strip().splitlines()):
            return lines[-1][:200]
    return "no log"


WAL_AND_COMMITS = """
SELECT pg_current_wal_lsn() - '0/0'::pg_lsn, xact_commit
  FROM pg_stat_database WHERE datname = current_database()
"""


def counters(connection: psycopg.Connection[Any]) -> tuple[float, float]:
    """WAL bytes written so far (the whole server) and this database's commits."""
    connection.execute("SELECT pg_stat_force_next_flush()")
    row = connection.execute(WAL_AND_COMMITS).fetchone()
    return (float(row[0]), float(row[1])) if row else (0.0, 0.0)


def rounds(
    peers: Peers, sizes: Sizes, names: Sequence[str], count: int, failures: list[str]
) -> Iterator[Result]:
    """Every measurement of every round; one that fails is named in `failures` and the
    others still run (a failed drain does not cost the pickup its figures)."""
    for number in range(count):
        order = [*names[number % len(names) :], *names[: number % len(names)]]
        print(f"round {number + 1}: {', '.join(order)}; load {load()}", flush=True)
        for peer in order:
            measurements: list[tuple[str, Callable[[], Result]]] = [
                (f"drain {p}", partial(peers.drain, peer, sizes, p, 0)) for p in sizes.processes
            ]
            if sizes.backlog:
                backlog = partial(peers.drain, peer, sizes, 1, sizes.backlog)
                measurements.append(("backlog 1", backlog))
            if sizes.pickups:
                measurements.append(("pickup", partial(peers.pickup, peer, sizes)))
            for kind, measure in measurements:
                try:
                    result = measure()
                except Exception as error:  # a benchmark reports a failure and goes on
                    failures.append(f"round {number + 1} {peer} {kind}")
                    print(f"  {peer} {kind}: FAILED: {error}", flush=True)
                    continue
                finally:
                    peers.stop(peers.started)
                print(f"  {run_line(result)}", flush=True)
                yield result


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"a whole number of 1 or more, not {text!r}")
    return int(text)


def main() -> None:
    made = parser(__doc__)
    made.add_argument("--rounds", type=int, help="rounds (default 3, --quick 1)")
    made.add_argument("--peers", default=",".join(ALL), help="comma-separated systems")
    made.add_argument("--peers-python", type=Path, default=PEERS_PYTHON)
    made.add_argument("--jobs", type=positive, help="jobs a drain (default 5000, --quick 1000)")
    made.add_argument("--drains-only", action="store_true", help="no backlog, no pickup")
    options = made.parse_args()
    names = [n.strip() for n in options.peers.split(",") if n.strip()]
    if unknown := set(names) - set(ALL):
        sys.exit(f"unknown system(s): {', '.join(sorted(unknown))} (choose from {', '.join(ALL)})")
    if set(names) - set(NOETA) and not options.peers_python.exists():
        sys.exit(f"no {options.peers_python}: run `make bench-peers` (it creates it)")
    sizes = QUICK if options.quick else FULL
    if options.jobs:
        sizes = dataclasses.replace(sizes, jobs=options.jobs)
    if options.drains_only:
        sizes = dataclasses.replace(sizes, backlog=0, pickups=0)
    if set(names) - set(NOETA):
        versions = [str(options.peers_python), "-c", VERSIONS]
        print(subprocess.run(versions, capture_output=True, text=True, check=False).stdout.strip())
    failures: list[str] = []
    with server(options.dsn) as dsn:
        peers = Peers(dsn, options.peers_python)
        try:
            count = options.rounds or sizes.rounds
            results = list(rounds(peers, sizes, names, count, failures))
        finally:
            peers.stop(peers.started)
            if not failures:  # a failed run's workers' logs stay, to say why
                shutil.rmtree(peers.scratch, ignore_errors=True)
    report(results, sizes, names)
    if failures:
        named = "; ".join(failures)
        sys.exit(f"bench-peers: {len(failures)} run(s) failed: {named} (logs: {peers.scratch})")


if __name__ == "__main__":
    main()
