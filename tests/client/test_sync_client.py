"""`Client`, the same calls without an event loop, on both stores."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from noeta.backends.stores import open_store
from noeta.client import Client
from noeta.core.errors import TaskFailed, UnknownTask
from tests.client import jobs_for_tests
from tests.worker.conftest import WorkerProcess

assert jobs_for_tests


async def test_the_sync_client_enqueues_waits_and_tails(
    store_url: str, job_workers: Callable[..., WorkerProcess]
) -> None:
    store = await open_store(store_url, migrate=True)
    await store.close()
    job_workers(store_url, "w", poll=0.1)
    with Client(store_url) as client:
        task = client.enqueue("resize", {"image": "b.png", "width": 8}, id="r1")
        assert client.job_result(task, timeout=60) == {"image": "b.png", "width": 8}
        assert client.get("r1").status == "done"
        kinds = [tailed.stored.type for tailed in client.tail(task)]
        assert kinds[:2] == ["TaskCreated", "CallRequested"] and kinds[-1] == "TaskFinished"
        failed = client.enqueue("broken", {"reason": "disk full"})
        with pytest.raises(TaskFailed, match="disk full"):
            client.result(failed, timeout=60)
        with pytest.raises(UnknownTask):
            client.get("nobody")
