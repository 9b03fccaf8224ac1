"""noeta's Python client: `AsyncClient`, and `Client` for code without an event loop."""

from typing import TYPE_CHECKING

from noeta.client.async_client import AsyncClient
from noeta.client.celery_calls import use_client
from noeta.client.handles import TaskHandle
from noeta.client.job_tasks import UnknownJob
from noeta.client.submissions import Submission
from noeta.client.sync_client import Client
from noeta.client.task_logs import TailedEvent

if TYPE_CHECKING:
    from noeta.client.forking import ForkRefused


def __getattr__(name: str) -> object:
    if name == "ForkRefused":  # its module folds logs: imported only when asked for
        from noeta.client.forking import ForkRefused

        return ForkRefused
    raise AttributeError(f"module 'noeta.client' has no attribute {name!r}")


__all__ = [
    "AsyncClient",
    "Client",
    "ForkRefused",
    "Submission",
    "TailedEvent",
    "TaskHandle",
    "UnknownJob",
    "use_client",
]
