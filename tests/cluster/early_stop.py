"""A mutant run's early stop: each task's log invariants checked as soon as it finishes
(a finished task is appended to no more, so what they find the end's checks would find
too), a running task's log by those that hold at every commit (and its takes marked),
and the run ended at the first problem instead of running its whole chaos."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from noeta.core.errors import StoreError
from noeta.core.ports.store import Store
from noeta.core.rules.replay import replay
from tests.cluster.fanout import OUTBOX
from tests.cluster.invariants import check_log, check_log_so_far, takes_marked

WATCH_EVERY = 0.5  # seconds between two looks for newly finished tasks


class EarlyChecks:
    """The checks of checks.py that read one task's log and inbox (invariants.py, replay),
    run once on each task that has finished, and a running task's log checked so far
    (invariants.check_log_so_far) at each look; the problems found."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.checked: set[str] = set()
        self.problems: list[str] = []

    async def look(self) -> list[str]:
        """Check the tasks that finished since the last call; every problem found so far.
        A task's log and its inbox's taken marks are final once it finished: an append
        needs a claim, and a finished task is claimed no more (a late delivery adds an
        untaken entry, which no check counts)."""
        records = await self.store.list_tasks(limit=10_000)
        for record in records:
            if record.id in self.checked or record.id == OUTBOX:
                continue
            log = await self.store.read_log(record.id)
            inbox = await self.store.read_inbox(record.id, untaken_only=False)  # after the log
            if not record.status.finished:  # it may have finished since: read as running
                self._found(record.id, [*check_log_so_far(log), *takes_marked(log, inbox)])
                continue
            self.checked.add(record.id)
            self._found(record.id, check_log(log, inbox))
            parted = replay(log)
            if parted is not None:
                self._found(record.id, [f"replay parts from this code at {parted}"])
        return self.problems

    def _found(self, task_id: str, problems: list[str]) -> None:
        for problem in problems:
            if f"{task_id}: {problem}" not in self.problems:  # a running task's, seen again
                self.problems.append(f"{task_id}: {problem}")

    async def found_something(self) -> bool:
        """Whether a problem is found now (a store error: not now, ask again later)."""
        try:
            return bool(await self.look())
        except StoreError:
            return False

    async def until_found(self) -> None:
        """Look again every WATCH_EVERY seconds: the store has no event for a finish."""
        while True:
            if await self.found_something():
                return
            await asyncio.sleep(WATCH_EVERY)

    async def run_until_found(self, phase: Coroutine[Any, Any, object]) -> bool:
        """Run `phase`, watching the tasks finish: cancelled at the first problem found
        (True), else run to its end (False; its exception, if any, is raised)."""
        running = asyncio.ensure_future(phase)
        watching = asyncio.ensure_future(self.until_found())
        try:
            await asyncio.wait({running, watching}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watching.cancel()
            if not running.done():
                running.cancel()
            await asyncio.gather(running, watching, return_exceptions=True)
        if not running.cancelled():
            running.result()  # the phase's own failure (a scenario's), as without a watch
            return bool(self.problems)
        return True
