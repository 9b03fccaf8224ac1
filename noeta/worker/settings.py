"""A worker's settings: its name, queues, concurrency, connections, lease, poll, grace
(`noeta worker`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerSettings:
    name: str
    queues: Sequence[str] = ("default",)
    concurrency: int = 4
    # The store connections its runs share, whatever the concurrency (`--connections`,
    # ADR-0139): two carry its group commit's rounds, the rest every other statement.
    # Its lease renewals, its claims and its LISTEN each hold one more besides.
    connections: int = 6
    lease_seconds: float = 30.0
    poll_seconds: float = 1.0  # the safety net under wake-ups
    # How long a stopping worker lets running steps finish (`noeta worker --grace`, 30 s);
    # 0: hand every running task back at once.
    grace_seconds: float = 0.0
    # Seconds a task may wait with no live worker offering what it needs before this
    # worker fails it plugin_missing (`--unrunnable-after`); None: it waits (ADR-0092).
    unrunnable_after: float | None = None
