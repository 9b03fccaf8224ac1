"""Background jobs under a worker: started after the log records them, their results
delivered to the task's inbox exactly once (dedupe key `job:<id>`), stopped with the claim.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from noeta.core.errors import StoreError
from noeta.core.retry import NO_JITTER, GaveUp, backoff_seconds, with_retries
from noeta.core.store import Delivery, Store
from noeta.core.tool import BackgroundJob
from noeta.plugins.core.bash import run_command

log = logging.getLogger("noeta.worker.jobs")

OUTPUT_CAP_CHARS = 8_000
DELIVERY_ATTEMPTS = 30  # a store outage while a job ends: keep trying, then it is lost


def _delivery_backoff(attempt: int, error: StoreError) -> float:
    """1, 2, 4, 8, then 10 s: about five minutes of outage before the result is lost."""
    return backoff_seconds(attempt, None, NO_JITTER, first=1.0, cap=10.0)


class JobManager:
    def __init__(self, store: Store, on_result: Callable[[str], None]) -> None:
        self.store = store
        self.on_result = on_result  # called with the task id once a result is delivered
        self._jobs: dict[str, dict[str, asyncio.Task[None]]] = {}

    def start(self, task_id: str, job_id: str, job: BackgroundJob) -> None:
        task = asyncio.create_task(self._run(task_id, job_id, job), name=f"noeta-job-{job_id}")
        self._jobs.setdefault(task_id, {})[job_id] = task

    def running(self, task_id: str) -> set[str]:
        return set(self._jobs.get(task_id, {}))

    async def stop(self, task_id: str) -> None:
        """The claim is lost: stop the task's jobs (their process groups are killed)."""
        for job_id, task in self._jobs.pop(task_id, {}).items():
            log.warning("task %s: stopping background job %s (claim lost)", task_id, job_id)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def stop_all(self) -> None:
        for task_id in list(self._jobs):
            await self.stop(task_id)

    async def _run(self, task_id: str, job_id: str, job: BackgroundJob) -> None:
        finished = await run_command(job.command, job.cwd, job.timeout_seconds, OUTPUT_CAP_CHARS)
        result = {
            "kind": "job",
            "job_id": job_id,
            "exit_code": finished.returncode,
            "output": finished.output().content,
        }
        delivery = Delivery(task_id, result, dedupe_key=f"job:{job_id}")  # type: ignore[arg-type]

        def not_yet(attempt: int, error: StoreError) -> None:
            log.warning("task %s: job %s result not delivered yet (%s)", task_id, job_id, error)

        # A lost result is not lost work: the task records the job as lost (JobLost).
        with contextlib.suppress(GaveUp):
            await with_retries(
                lambda: self.store.deliver(delivery),
                StoreError,
                max_attempts=DELIVERY_ATTEMPTS,
                wait=_delivery_backoff,
                sleep=asyncio.sleep,
                on_failure=not_yet,
            )
        self._jobs.get(task_id, {}).pop(job_id, None)
        self.on_result(task_id)
