"""Whether the run writing now is the only one its worker has (ADR-0135).

A store that shares commits among the runs of a process (ADR-0086) has a write that finds
a round free wait out its turn of the event loop, so the writes of the runs one commit
woke go with it (ADR-0125). A worker with a single run knows none can come: its run's
writes go at once, a turn of the loop sooner (0.01-0.13 ms on an idle worker's pickup,
docs/scaling.md). The worker says so for the runs it starts by setting `RUNS_WRITING` to
its count of runs that may write (running or holding a claim); elsewhere (a client, a
test) it is unset, and every write waits its turn as before."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

RUNS_WRITING: ContextVar[Callable[[], int] | None] = ContextVar("noeta_runs_writing", default=None)


def lone_run() -> bool:
    """True where a worker runs this run alone: no other write can come in this turn."""
    runs = RUNS_WRITING.get()
    return runs is not None and runs() <= 1
