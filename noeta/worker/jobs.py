"""Background jobs under a worker: started after the log records them, their results
delivered to the task's inbox exactly once (dedupe key `job:<id>`), stopped with the claim
they ran under (kept by its key: a later epoch of the same task has jobs of its own).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from noeta.core.errors import StoreError
from noeta.core.store import Claim, ClaimKey, Delivery, Store
from noeta.core.tool import BackgroundJob
from noeta.plugins.core.bash import run_command

log = logging.getLogger("noeta.worker.jobs")

OUTPUT_CAP_CHARS = 8_000
DELIVERY_ATTEMPTS = 30  # a store outage while a job ends: keep trying, then it is lost


class JobManager:
    def __init__(self, store: Store, on_result: Callable[[Claim], None]) -> None:
        self.store = store
        self.on_result = on_result  # called with the claim once a result is delivered
        self._jobs: dict[ClaimKey, dict[str, asyncio.Task[None]]] = {}

    def start(self, claim: Claim, job_id: str, job: BackgroundJob) -> None:
        task = asyncio.create_task(self._run(claim, job_id, job), name=f"noeta-job-{job_id}")
        self._jobs.setdefault(claim.key, {})[job_id] = task

    def running(self, claim: Claim) -> set[str]:
        return set(self._jobs.get(claim.key, {}))

    async def stop(self, claim: Claim, why: str) -> None:
        """The claim ended: stop its jobs (their process groups are killed)."""
        for job_id, task in self._jobs.pop(claim.key, {}).items():
            log.warning("task %s: stopping background job %s (%s)", claim.task_id, job_id, why)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def stop_all(self) -> None:
        for key in list(self._jobs):
            for task in self._jobs.pop(key, {}).values():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _run(self, claim: Claim, job_id: str, job: BackgroundJob) -> None:
        task_id = claim.task_id
        finished = await run_command(job.command, job.cwd, job.timeout_seconds, OUTPUT_CAP_CHARS)
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
        self._jobs.get(claim.key, {}).pop(job_id, None)
        self.on_result(claim)
