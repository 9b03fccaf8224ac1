"""What every part of the store contract shares: the fixtures a backend fills in, the
lease lengths, and the task the tests create."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime

import pytest

from noeta.backends.stores import open_store
from noeta.core.ports.store import Claim, NewEvent, NewTask, Store

LEASE = 30.0
SHORT_LEASE = 0.3


def created(task_id: str, queue: str = "default", **kwargs: object) -> NewTask:
    return NewTask(task_id, [NewEvent("created", {"id": task_id})], queue=queue, **kwargs)  # type: ignore[arg-type]


async def take_over(
    store: Store, held: Claim, worker: str = "heir", queue: str = "default"
) -> Claim:
    """Claim `held`'s task as `worker` once its lease runs out, the lease cut short only
    now: a test that claims with a long lease and takes over here never races the steps
    before (a short lease from the claim on can run out before them on a loaded machine)."""
    renewed = await store.renew([held], SHORT_LEASE)
    assert held.task_id in renewed, "the claim was lost before the takeover"
    return await eventually_claim(store, worker, [queue])


async def eventually_claim(
    store: Store, worker: str, queues: list[str], within: float = 10.0
) -> Claim:
    """Poll claim until one succeeds: for conditions that only time brings (a lease, a due time)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while loop.time() < deadline:
        claim = await store.claim(worker, queues, LEASE)
        if claim is not None:
            return claim
        await asyncio.sleep(0.02)
    raise AssertionError(f"nothing became claimable within {within} s")


async def until_store_time(store: Store, moment: datetime) -> None:
    """Wait until the store's clock has passed `moment` (a due time only time brings):
    the store's clock runs at the local clock's rate, the margin covers the loop's."""
    left = (moment - await store.clock()).total_seconds()
    await asyncio.sleep(max(0.0, left) + 0.005)
    assert await store.clock() > moment


class StoreFixtures:
    """`store_url` (a backend's test module provides it) and the migrated `store` on it."""

    @pytest.fixture
    def store_url(self) -> str:
        raise NotImplementedError("a backend's test module provides store_url")

    @pytest.fixture
    async def store(self, store_url: str) -> AsyncIterator[Store]:
        store = await open_store(store_url, migrate=True)
        yield store
        await store.close()
