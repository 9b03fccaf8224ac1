"""The chaos: every fault kind the cluster run injects, and the loop that injects them.

Process faults (SIGKILL one worker or all, SIGSTOP for 1.5-3 leases, kill the
scheduler), database faults (worker backends terminated, PostgreSQL restarted fast or
immediate), network faults through the proxied workers' fault proxies (a blackhole for a
while; every open connection forgotten for good, as by a firewall or a NAT; an append
cut before it reaches the server or right after it was sent, so its outcome is unknown)
and a claim whose reply is lost (failpoint: CommitUnknown after the claim committed).
Each kind runs once early, in a seeded order, then at random. A fault is counted only if
it landed (a cut that found no append to cut did not).
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections import Counter

from tests.cluster.processes import LEASE, Cluster
from tests.cluster.workload import Workload, steadily

WEIGHTS = {
    "sigkill": 3,
    "sigkill-all": 1,
    "sigstop": 2,
    "scheduler-kill": 1,
    "pg-terminate": 2,
    "pg-restart-fast": 1,
    "pg-restart-immediate": 1,
    "blackhole": 2,
    "forget": 1,
    "cut-after-commit": 2,
    "cut-before-commit": 2,
    "claim-commit-unknown": 1,
}
RESTARTS = ("pg-restart-fast", "pg-restart-immediate")
RESTARTING = ("sigkill", "claim-commit-unknown")
CLAIM_REPLY_LOST = "claim.after_commit=raise(CommitUnknown)@{n}"
# When a forgotten connection's ends are reset: as the keepalives a worker asks of both
# sides by default would find them (60 s idle, 3 probes 10 s apart; ADR-0129, ADR-0154).
FORGOTTEN_FOR = 90.0


def available(cluster: Cluster) -> list[str]:
    """The fault kinds this run can inject (no restarts of a server it does not control)."""
    return [kind for kind in WEIGHTS if cluster.server.can_restart or kind not in RESTARTS]


class Chaos:
    def __init__(self, cluster: Cluster, workload: Workload, rng: random.Random) -> None:
        self.cluster = cluster
        self.workload = workload
        self.rng = rng
        self.landed: Counter[str] = Counter()
        self.kinds = available(cluster)

    async def run(self, seconds: float) -> None:
        """Tasks are created through the first two thirds of the window, so the chaos
        meets them mid-step, not only idle workers."""
        start = time.monotonic()
        first_round = self.rng.sample(self.kinds, len(self.kinds))
        while (elapsed := time.monotonic() - start) < seconds:
            await asyncio.sleep(self.rng.uniform(0.3, 1.2))
            fraction = elapsed / (seconds * 2 / 3)
            await self.workload.create_due(fraction)  # each creation retries store faults
            await steadily(self.workload.maybe_chat)
            await steadily(self.workload.cancel_launched)
            if first_round:
                kind = first_round.pop()
            else:
                kind = self.rng.choices(self.kinds, [WEIGHTS[k] for k in self.kinds])[0]
            await self.inject(kind)
            if not self.landed[kind] and kind != "claim-commit-unknown":
                first_round.insert(0, kind)  # it found nothing to hit: again, later

    async def inject(self, kind: str) -> None:
        cluster, rng = self.cluster, self.rng
        name = rng.choice(sorted(cluster.workers))
        if kind in RESTARTING and name in cluster.previous:
            name = rng.choice(cluster.restartable())  # an old worker cannot start again
        proxied = rng.choice(sorted(cluster.proxies)) if cluster.proxies else name
        landed = True
        if kind == "sigkill":
            cluster.note(f"SIGKILL {name}, restart")
            cluster.restart_worker(name)
        elif kind == "sigkill-all":
            cluster.note("SIGKILL every worker, restart them")
            for each in cluster.restartable():
                cluster.restart_worker(each)
        elif kind == "sigstop":
            pause = rng.uniform(1.5, 3.0) * LEASE
            cluster.note(f"SIGSTOP {name} for {pause:.1f} s")
            cluster.workers[name].send_signal(signal.SIGSTOP)
            await asyncio.sleep(pause)
            cluster.workers[name].send_signal(signal.SIGCONT)
        elif kind == "scheduler-kill" and cluster.scheduler is not None:
            cluster.note("SIGKILL the scheduler, restart")
            cluster.kill(cluster.scheduler)
            cluster.start_scheduler()
        elif kind == "pg-terminate":
            count = await asyncio.to_thread(cluster.server.terminate_worker_backends, rng)
            cluster.note(f"pg_terminate_backend: {count} worker backends")
            landed = count > 0
        elif kind in RESTARTS:
            mode = kind.removeprefix("pg-restart-")
            cluster.note(f"PostgreSQL restart, {mode} mode")
            await asyncio.to_thread(cluster.server.restart, mode)
            cluster.note("PostgreSQL is back")
        elif kind == "blackhole":
            pause = rng.uniform(2.0, 4.0) * LEASE
            cluster.note(f"blackhole {proxied} for {pause:.1f} s")
            cluster.proxies[proxied].blackhole()
            await asyncio.sleep(pause)
            cluster.proxies[proxied].heal()
        elif kind == "forget":
            count = cluster.proxies[proxied].forget(ends_after=FORGOTTEN_FOR)
            cluster.note(f"the path forgot {proxied}'s {count} connections")
            landed = count > 0
        elif kind in ("cut-after-commit", "cut-before-commit"):
            landed = await self._cut(before=kind == "cut-before-commit")
        elif kind == "claim-commit-unknown":
            failpoints = CLAIM_REPLY_LOST.format(n=rng.randint(1, 3))
            cluster.note(f"restart {name} with {failpoints}")
            cluster.restart_worker(name, failpoints=failpoints)
            landed = False  # counted from the worker's output, once it fired
        if landed:
            self.landed[kind] += 1

    async def _cut(self, *, before: bool) -> bool:
        """Arm every proxy to cut its next append; True once one was cut (the others are
        disarmed), False if none was within the wait."""
        proxies = self.cluster.proxies
        where = "before it reached the server" if before else "after it was sent"
        for proxy in proxies.values():
            proxy.cut_statement(before=before)
        deadline = time.monotonic() + 10 * LEASE
        cut: list[str] = []
        while not cut and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            cut = [name for name, proxy in proxies.items() if not proxy.statement_cut_pending()]
        for proxy in proxies.values():
            proxy.disarm()
        self.cluster.note(f"{', '.join(cut) or 'no worker'}: an append cut {where}")
        return bool(cut)
