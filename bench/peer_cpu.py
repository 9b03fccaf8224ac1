"""CPU during a drain, from /proc (Linux): the workers', the PostgreSQL server's, and the
cores anything else on the machine used meanwhile (a noisy run shows here)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from worker import machine_cpu

TICK = os.sysconf("SC_CLK_TCK")
# (time, jobs done, workers' CPU s, server's CPU s, machine busy and total jiffies, ours)
Sample = tuple[float, int, float, float, int, int, float]


def stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def postmaster_of(backend: int) -> int | None:
    """The server process that forked `backend` (a connection's pg_backend_pid())."""
    fields = stat(backend)
    return int(fields[1]) if fields else None


def children(pid: int) -> list[int]:
    found: list[int] = []
    for listing in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found += [int(child) for child in listing.read_text().split()]
        except OSError:
            continue
    return found


def own_cpu(pid: int) -> float:
    """CPU seconds of `pid` alone."""
    fields = stat(pid)
    return (int(fields[11]) + int(fields[12])) / TICK if fields else 0.0


def tree_cpu(pid: int) -> float:
    """CPU seconds of `pid`, its live descendants and the children it reaped."""
    total, todo, seen = 0, [pid], set()
    while todo:
        each = todo.pop()
        if each in seen or (fields := stat(each)) is None:
            continue
        seen.add(each)
        total += sum(int(fields[i]) for i in (11, 12, 13, 14))
        todo += children(each)
    return total / TICK


@dataclass
class CpuWindow:
    """Samples (time, jobs done, workers' CPU, server's CPU, machine busy and total
    jiffies, this process's CPU), one per poll of a drain (or one before and one after
    the pickups)."""

    workers: list[int]
    server: int | None
    poll_backend: int | None = None  # the bench's own connection: counted as ours
    samples: list[Sample] = field(default_factory=list)

    @property
    def done(self) -> int:
        return self.samples[-1][1] if self.samples else 0

    def sample(self, done: int) -> None:
        own = os.times()
        workers = sum(tree_cpu(pid) for pid in self.workers)
        poll = own_cpu(self.poll_backend) if self.poll_backend else 0.0
        server = (tree_cpu(self.server) - poll) if self.server else 0.0
        busy, total = machine_cpu()
        now = own.elapsed
        # This process and the children it reaped (the pickup probe's process).
        ours = own.user + own.system + own.children_user + own.children_system + poll
        self.samples.append((now, done, workers, server, busy, total, ours))

    def span(self, jobs: int) -> tuple[Sample, Sample]:
        """The polls that saw 10 % and 90 % of `jobs` done, so that the workers' start-up
        and shutdown stay out; the first and last poll when that is too short."""
        first = next((s for s in self.samples if s[1] >= 0.1 * jobs), None)
        last = next((s for s in self.samples if s[1] >= 0.9 * jobs), None)
        if first is None or last is None or last[0] - first[0] < 0.2 or last[1] <= first[1]:
            first, last = self.samples[0], self.samples[-1]
        return first, last

    def per_job(self, jobs: int) -> tuple[float, float] | None:
        """CPU milliseconds per job done in the span: the workers' process trees, and the
        whole PostgreSQL server's (every backend but the bench's own poll)."""
        first, last = self.span(jobs)
        done = last[1] - first[1]
        if done <= 0:
            return None
        return (last[2] - first[2]) * 1000 / done, (last[3] - first[3]) * 1000 / done

    def other_cores(self, jobs: int) -> float | None:
        """Cores used by neither the workers, the server nor this process, in the span."""
        first, last = self.span(jobs)
        seconds = last[0] - first[0]
        if seconds <= 0:
            return None
        busy = (last[4] - first[4]) / TICK
        ours = sum(last[i] - first[i] for i in (2, 3, 6))
        return max(0.0, busy - ours) / seconds
