"""noeta's Python client: `AsyncClient`, and `Client` for code without an event loop."""

from noeta.client.async_client import AsyncClient
from noeta.client.celery_calls import use_client
from noeta.client.handles import TaskHandle
from noeta.client.job_tasks import UnknownJob
from noeta.client.submissions import Submission
from noeta.client.sync_client import Client
from noeta.client.task_logs import TailedEvent

__all__ = [
    "AsyncClient",
    "Client",
    "Submission",
    "TailedEvent",
    "TaskHandle",
    "UnknownJob",
    "use_client",
]
