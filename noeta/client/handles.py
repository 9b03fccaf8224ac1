"""`TaskHandle`: what creating a task returns. One made by a blocking `Client` (and so by
`fn.delay()`) also waits for its job's result, as Celery's `AsyncResult.get` does."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from noeta.core.errors import ConfigError
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.store import DEFAULT_QUEUE


class JobResults(Protocol):
    def job_result(self, task: TaskHandle, *, timeout: float | None = None) -> JSONValue: ...


@dataclass(frozen=True, slots=True)
class TaskHandle:
    """A task this client made; anywhere a task is asked for, its id does as well."""

    id: str
    queue: str = DEFAULT_QUEUE
    # The blocking Client that made it, for get(); not part of what the handle is.
    results: JobResults | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return self.id

    def get(self, timeout: float | None = None) -> JSONValue:
        """The job's result once it is done (Celery's `AsyncResult.get`): raises
        TaskFailed, TaskCancelled, or ResultTimeout after `timeout` seconds."""
        if self.results is None:
            raise ConfigError(
                f"task {self.id}: this handle came from an AsyncClient; "
                "await client.job_result(handle) instead"
            )
        return self.results.job_result(self, timeout=timeout)
