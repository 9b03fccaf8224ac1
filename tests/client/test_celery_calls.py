"""The Celery-shaped call site (issue 29 item 7): `fn.delay(...)` and `fn.apply_async(...)`
on a `@noeta.tool` function enqueue it as `enqueue` does and return its handle, whose
`get(timeout=…)` waits like `AsyncResult.get`; bad calls fail before anything is written."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from noeta.backends.stores import open_store
from noeta.client import Client, use_client
from noeta.core.errors import ConfigError
from tests.client import jobs_for_tests
from tests.worker.conftest import WorkerProcess

# The decorated functions as the program sees them; `delay` is not in their static type.
resize: Any = jobs_for_tests.resize


@pytest.fixture
def client(postgres_url: str) -> Iterator[Client]:
    asyncio.run(_migrate(postgres_url))
    with Client(postgres_url) as client:
        use_client(client)
        yield client
        use_client(None)


def test_delay_enqueues_and_get_waits_for_the_result(
    client: Client, postgres_url: str, job_workers: Callable[..., WorkerProcess]
) -> None:
    positional = resize.delay("a.png", 3)
    handle = resize.delay(image="b.png", width=4)
    job_workers(postgres_url, "w", poll=0.1)
    assert positional.get(timeout=60) == {"image": "a.png", "width": 3}
    assert handle.get(timeout=60) == {"image": "b.png", "width": 4}
    assert client.job_result(handle.id, timeout=60) == {"image": "b.png", "width": 4}


def test_apply_async_sets_queue_key_priority_and_the_start(client: Client) -> None:
    soon = resize.apply_async(
        kwargs={"image": "c.png", "width": 5}, queue="celery", key="t1", priority=9
    )
    later = resize.apply_async(("d.png", 6), countdown=3600, queue="celery")
    at = datetime.now(UTC) + timedelta(days=1)
    planned = resize.apply_async(kwargs={"image": "e.png", "width": 7}, eta=at, queue="celery")
    assert client.get(soon).queue == "celery"
    later_start = client.get(later).ready_at
    assert later_start is not None and later_start > datetime.now(UTC) + timedelta(minutes=30)
    assert client.get(planned).ready_at == at


def test_a_call_the_signature_refuses_writes_nothing(client: Client) -> None:
    with pytest.raises(TypeError, match=r"resize\(\): got an unexpected keyword argument 'h"):
        resize.delay(image="a.png", width=1, height=2)
    with pytest.raises(TypeError, match=r"resize\(\): missing a required argument: 'width'"):
        resize.delay(image="a.png")
    with pytest.raises(TypeError, match=r"resize\(\): too many positional arguments"):
        resize.delay("a.png", 1, 2)
    with pytest.raises(ConfigError, match="countdown must be zero or more seconds, not -1"):
        resize.apply_async(kwargs={"image": "a.png", "width": 1}, countdown=-1)
    with pytest.raises(ConfigError, match="countdown or eta, not both"):
        resize.apply_async(
            kwargs={"image": "a.png", "width": 1}, countdown=1, eta=datetime.now(UTC)
        )
    assert client.tasks() == []


async def _migrate(url: str) -> None:
    await (await open_store(url, migrate=True)).close()
