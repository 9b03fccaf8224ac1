"""The cluster's processes: workers (some behind a fault proxy each), the scheduler, and
the timeline of what was done to them, for the report and a failing run's replay.
Workers run in the repository (the subagents' model scripts are named from there), with
`examples/` importable for the example notify plugin."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from psycopg.conninfo import make_conninfo

from noeta.core.ports.store import Store
from noeta.testing.fault_proxy import FaultProxy
from tests.cluster import previous_release
from tests.cluster.server import ClusterServer, host_and_port

REPOSITORY = Path(__file__).parents[2]
WORKERS = ("w0", "w1", "w2", "w3")
PROXIED = WORKERS  # each reaches PostgreSQL through its own fault proxy
LEASE = 1.0
# The SQL functions a worker's appends call (noeta/backends/stores/postgres/appends.py,
# model_limits.py): what the outcome-unknown faults cut, named one by one.
APPENDS = (
    "noeta_append",
    "noeta_append_and_continue",
    "noeta_append_and_finish",
    "noeta_append_batch",
    "noeta_append_model_called",
    "noeta_append_model_called_keeping_claim",
)


@dataclass
class Cluster:
    url: str
    scratch: Path
    server: ClusterServer
    store: Store
    started: float = field(default_factory=time.monotonic)
    started_wall: float = field(default_factory=time.time)  # the timeline's zero, on the wall
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    scheduler: subprocess.Popen[bytes] | None = None
    proxies: dict[str, FaultProxy] = field(default_factory=dict)
    timeline: list[tuple[float, str]] = field(default_factory=list)
    # (worker name, wall-clock time it was started): which process life an event is of.
    starts: list[tuple[str, float]] = field(default_factory=list)
    # Workers that run a previous release (tests/cluster/upgrade.py): name -> its tree.
    # They cannot start again once the schema is migrated past them: never restarted.
    previous: dict[str, Path] = field(default_factory=dict)
    # Workers and the scheduler behind PgBouncer (`--pgbouncer`, ADR-0106): its URL for
    # the pool, `url` (PostgreSQL's own) their NOETA_STORE_SESSION.
    pooled_url: str | None = None
    # Each worker's queues and config file (in scratch), which a restart starts it with.
    setups: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def pool_url(self) -> str:
        """What workers and the scheduler pool through: PgBouncer's URL, or the store's."""
        return self.pooled_url or self.url

    @property
    def env(self) -> dict[str, str]:
        session = {"NOETA_STORE_SESSION": self.url} if self.pooled_url else {}
        return {
            **os.environ,
            "NOETA_HOME": str(self.scratch / "home"),
            "NOETA_CLUSTER_LEDGER": str(self.scratch / "ledger"),
            "NOETA_FAILPOINTS": "",
            "PYTHONPATH": str(REPOSITORY / "examples"),
            **session,
        }

    def note(self, what: str) -> None:
        self.timeline.append((time.monotonic() - self.started, what))

    def open_proxies(self, names: tuple[str, ...] = PROXIED) -> None:
        host, port = host_and_port(self.pool_url)
        for name in names:
            proxy = FaultProxy(host, port, cut_functions=APPENDS)
            proxy.start()
            self.proxies[name] = proxy

    def worker_url(self, name: str) -> str:
        proxy = self.proxies.get(name)
        if proxy is None:
            return self.pool_url
        return make_conninfo(self.pool_url, host="127.0.0.1", port=str(proxy.port))

    def start_worker(
        self,
        name: str,
        *,
        failpoints: str = "",
        queues: str = "default",
        lease: float = LEASE,
        config: str = "noeta.yaml",
    ) -> None:
        self.setups[name] = (queues, config)
        command = [sys.executable, "-m", "noeta", "worker"]  # the URL, with its password, in env
        command += ["--name", name, "--lease", str(lease), "--poll", "0.5", "--concurrency", "4"]
        command += ["--queues", queues, "--config", str(self.scratch / config)]
        env = {
            **self.env,
            "NOETA_STORE": self.worker_url(name),
            "NOETA_FAILPOINTS": failpoints,
            "NOETA_APPEND_JOURNAL": str(self.scratch / f"journal-{name}"),
        }
        if name in self.previous:
            env.update(previous_release.environment(self.previous[name]))
        output = (self.scratch / f"{name}.log").open("a")
        self.starts.append((name, time.time()))
        self.workers[name] = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, env=env, cwd=REPOSITORY
        )

    def restartable(self) -> list[str]:
        """The workers a fault may kill and start again: not those of a previous release."""
        return sorted(name for name in self.workers if name not in self.previous)

    def start_scheduler(self) -> None:
        # The URL, with its password, in env, not on argv (ps shows argv to every user).
        command = [sys.executable, "-m", "noeta", "scheduler"]
        command += ["--cron", str(self.scratch / "cron.yaml")]
        output = (self.scratch / "scheduler.log").open("a")
        env = {**self.env, "NOETA_STORE": self.pool_url}
        self.scheduler = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env)

    def restart_worker(self, name: str, *, failpoints: str = "") -> None:
        self.kill(self.workers[name])
        queues, config = self.setups[name]
        self.start_worker(name, failpoints=failpoints, queues=queues, config=config)

    def kill(self, process: subprocess.Popen[bytes]) -> None:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.kill()
            process.wait(10)

    def stop_everything(self) -> None:
        for process in [*self.workers.values(), self.scheduler]:
            if process is not None:
                self.kill(process)
        for proxy in self.proxies.values():
            proxy.heal()

    def close_proxies(self) -> None:
        for proxy in self.proxies.values():
            proxy.stop()
        self.proxies.clear()

    def worker_logs(self) -> list[Path]:
        return sorted(self.scratch.glob("*.log"))

    def worker_output(self) -> str:
        return "".join(path.read_text(errors="replace") for path in self.worker_logs())
