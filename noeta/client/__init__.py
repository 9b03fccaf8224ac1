"""noeta's Python client: `AsyncClient`, and `Client` for code without an event loop."""

from noeta.client.async_client import AsyncClient, Submission, TailedEvent, TaskHandle
from noeta.client.job_tasks import UnknownJob
from noeta.client.sync_client import Client

__all__ = [
    "AsyncClient",
    "Client",
    "Submission",
    "TailedEvent",
    "TaskHandle",
    "UnknownJob",
]
