"""Bulk actions running in the background of `noeta web` (issue 31): a confirmed retry,
cancel or prune of a filter starts a run and the request returns at once; the run's page
shows how far it is and stops it between two batches. The bulk logic is batch-wise and
idempotent (ADR-0098, ADR-0112): a run stopped, or lost with the process, is started again
from the list and skips what was done, so nothing here is kept beyond this process."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from noeta.client.bulk_actions import BulkOutcome, Progress
from noeta.core.errors import NoetaError
from noeta.web.render import scrubbed

log = logging.getLogger("noeta.web")

KEPT_RUNS = 20  # finished runs whose page still answers; the oldest go first
WAIT_SECONDS = 1.0  # a run page waits this long for its run to end: a small one is done


class BulkStopped(Exception):
    """Raised between two batches of a run asked to stop: its batches so far stay done."""


@dataclass(eq=False)
class BulkRun:
    """One running (or finished) bulk action: what it acts on, and its outcome so far."""

    id: str
    action: str  # retry, cancel or prune
    described: str  # "3 failed tasks of queue default", as its confirmation said
    confirmed: int  # at most this many tasks, the count the confirmation showed
    back: str  # the list the action was taken from
    outcome: BulkOutcome = field(default_factory=BulkOutcome)
    stopping: bool = False
    stopped: bool = False
    failure: str | None = None  # why it ended early (the store failed, a refusal)
    task: asyncio.Task[None] | None = None

    @property
    def finished(self) -> bool:
        return self.task is not None and self.task.done()

    def progress(self, outcome: BulkOutcome) -> None:
        """After each batch: the outcome so far, and the place a stop is taken."""
        self.outcome = outcome
        if self.stopping:
            raise BulkStopped


Work = Callable[[Progress], Awaitable[BulkOutcome]]


class BulkRuns:
    """The bulk runs of one `noeta web` process."""

    def __init__(self) -> None:
        self._runs: dict[str, BulkRun] = {}

    def start(self, run: BulkRun, work: Work) -> BulkRun:
        """Run `work` (given the run's progress) in the background under `run.id`."""
        self._forget_old()
        self._runs[run.id] = run
        run.task = asyncio.create_task(self._ran(run, work), name=f"noeta-web-bulk-{run.id}")
        return run

    def get(self, run_id: str) -> BulkRun | None:
        return self._runs.get(run_id)

    async def settled(self, run: BulkRun) -> None:
        """Wait until `run` ends, or WAIT_SECONDS (an event, not a poll: the run's task)."""
        if run.task is not None and not run.task.done():
            await asyncio.wait({run.task}, timeout=WAIT_SECONDS)

    async def close(self) -> None:
        """Stop every run now (the process ends): each one's batches so far stay done."""
        running = [run.task for run in self._runs.values() if run.task and not run.task.done()]
        for task in running:
            task.cancel()
        for task in running:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _ran(self, run: BulkRun, work: Work) -> None:
        try:
            run.outcome = await work(run.progress)
        except BulkStopped:
            run.stopped = True
        except NoetaError as error:  # the store failed, or refused: run it again to go on
            run.failure = scrubbed(str(error))
        except Exception as error:  # a bug: said on the page, logged without its text
            log.error("noeta web: bulk %s run failed: %s", run.action, type(error).__name__)
            run.failure = f"unexpected {type(error).__name__} (a bug in noeta web)"

    def _forget_old(self) -> None:
        finished = [run_id for run_id, run in self._runs.items() if run.finished]
        for run_id in finished[: max(0, len(finished) - KEPT_RUNS + 1)]:
            del self._runs[run_id]


def new_run_id() -> str:
    return secrets.token_urlsafe(9)
