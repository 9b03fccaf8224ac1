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
from noeta.core.ports.store import Claim, ClaimKey, Delivery, Store
from noeta.core.ports.tool import BackgroundJob
from noeta.core.retry import NO_JITTER, GaveUp, backoff_seconds, with_retries
from noeta.core.runner.reply_streams import StreamWriter
from noeta.core.runner.tool_streams import open_job_stream
from noeta.plugins.core.bash import run_job

log = logging.getLogger("noeta.worker.jobs")

OUTPUT_CAP_CHARS = 8_000
DELIVERY_ATTEMPTS = 30  # a store outage while a job ends: keep trying, then it is lost


def _delivery_backoff(attempt: int, error: StoreError) -> float:
    """1, 2, 4, 8, then 10 s: about five minutes of outage before the result is lost."""
    return backoff_seconds(attempt, None, NO_JITTER, first=1.0, cap=10.0)


class JobManager:
    def __init__(
        self,
        store: Store,
        on_result: Callable[[Claim], None],
        streams: StreamWriter | None = None,
    ) -> None:
        self.store = store
        self.on_result = on_result  # called with the claim once a result is delivered
        self.streams = streams  # where a job's output streams to its task's readers
        self._jobs: dict[ClaimKey, dict[str, asyncio.Task[None]]] = {}

    def start(self, claim: Claim, job_id: str, job: BackgroundJob) -> None:
        task = asyncio.create_task(self._run(claim, job_id, job), name=f"noeta-job-{job_id}")
        self._jobs.setdefault(claim.key, {})[job_id] = task

    def running(self, claim: Claim) -> set[str]:
        return set(self._jobs.get(claim.key, {}))

    def has_jobs(self, claim: Claim) -> bool:
        """Whether jobs of the claim may still run; a claim with none is forgotten here,
        as `stop` would (a claim's end spawns no `stop` task for nothing)."""
        if self._jobs.get(claim.key):
            return True
        self._jobs.pop(claim.key, None)
        return False

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
        stream = open_job_stream(self.streams, task_id, claim.epoch, job_id)
        try:
            finished = await run_job(job, OUTPUT_CAP_CHARS, stream.output if stream else None)
        except BaseException:
            if stream is not None:
                stream.abandon()  # stopped with its claim: nothing more is written
            raise
        if stream is not None:
            stream.end()
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
        self._jobs.get(claim.key, {}).pop(job_id, None)
        self.on_result(claim)
