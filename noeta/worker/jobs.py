"""Background jobs under a worker: started after the log records them, their results
delivered to the task's inbox exactly once (dedupe key `job:<id>`), stopped with the claim.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from noeta.core.errors import StoreError
from noeta.core.store import Delivery, Store
from noeta.core.tool import BackgroundJob
from noeta.plugins.core.bash import run_command

log = logging.getLogger("noeta.worker.jobs")

OUTPUT_CAP_CHARS = 8_000
DELIVERY_ATTEMPTS = 30  # a store outage while a job ends: keep trying, then it is lost


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
        finished = await run_command(
            job.command, job.cwd, job.timeout_seconds, OUTPUT_CAP_CHARS, job.environment
        )
        result = {
            "kind": "job",
            "job_id": job_id,
            "exit_code": finished.returncode,
            "output": finished.output().content,
        }
        delivery = Delivery(task_id, result, dedupe_key=f"job:{job_id}")  # type: ignore[arg-type]
        for attempt in range(DELIVERY_ATTEMPTS):
            try:
                await self.store.deliver(delivery)
                break
            except StoreError as error:
                log.warning("task %s: job %s result not delivered yet (%s)", task_id, job_id, error)
                await asyncio.sleep(min(2.0**attempt, 10.0))
        self._jobs.get(task_id, {}).pop(job_id, None)
        self.on_result(task_id)
