"""The contract for bulk creation: a batch lands whole with its first events, or, with one
bad or taken task in it, nothing of it does and the error names that task."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from noeta.core.errors import Conflict, PayloadError
from noeta.core.ports.bulk import BulkCreate
from noeta.core.ports.queue_settings import QueueChange, queue_settings_store
from noeta.core.ports.store import NewEvent, NewTask, Store
from noeta.testing.store_contract.fixtures import LEASE, created


def bulk(store: Store) -> BulkCreate:
    assert isinstance(store, BulkCreate)
    return store


class BulkContract:
    """`create_tasks`: all or nothing, each task as `create_task` would make it."""

    async def test_a_batch_keeps_each_tasks_key_and_priority(self, store: Store) -> None:
        await queue_settings_store(store).set_queue("q", QueueChange(per_key_concurrency=1))
        now = await store.clock()
        batch = [
            created(
                name,
                "q",
                ready_at=now - timedelta(seconds=10 - n),
                concurrency_key=key,
                priority=priority,
            )
            for n, (name, key, priority) in enumerate(
                [("k1", "k", 0), ("k2", "k", 0), ("low", None, 0), ("high", None, 7)]
            )
        ]
        await bulk(store).create_tasks(batch)
        first = await store.claim_and_load("w", ["q"], LEASE, limit=1, snapshot_version="v")
        assert [each.claim.task_id for each in first] == ["high"]
        rest = await store.claim_and_load("w", ["q"], LEASE, limit=5, snapshot_version="v")
        assert {each.claim.task_id for each in rest} == {"k1", "low"}  # k2: key k is full

    async def test_a_batch_is_created_with_its_first_events(self, store: Store) -> None:
        later = datetime.now(UTC) + timedelta(hours=1)
        two_events = NewTask("b", [NewEvent("created", {"n": 1}), NewEvent("noted", {"n": 2})])
        batch = [created("a"), two_events, created("c", queue="other", ready_at=later)]
        await bulk(store).create_tasks(batch)
        assert [(e.seq, e.type, e.data) for e in await store.read_log("b")] == [
            (1, "created", {"n": 1}),
            (2, "noted", {"n": 2}),
        ]
        record = await store.get_task("b")
        assert record is not None and record.last_seq == 2
        later_one = await store.get_task("c")
        assert later_one is not None and later_one.queue == "other"
        assert later_one.ready_at == later
        claimed = {(await store.claim("w", ["default", "other"], LEASE)) for _ in range(3)}
        # "c" is not due for an hour: only the two due ones are claimable.
        assert {claim.task_id for claim in claimed if claim} == {"a", "b"}

    async def test_a_batch_with_a_taken_id_writes_nothing(self, store: Store) -> None:
        assert await store.create_task(created("b"))
        with pytest.raises(Conflict) as refused:
            await bulk(store).create_tasks([created("a"), created("b"), created("c")])
        assert refused.value.task_id == "b"
        assert await store.get_task("a") is None and await store.get_task("c") is None
        assert await store.read_log("a") == []

    async def test_a_batch_giving_an_id_twice_writes_nothing(self, store: Store) -> None:
        with pytest.raises(PayloadError, match=r"task 2 of the batch \(id 'a'\).*task 0"):
            await bulk(store).create_tasks([created("a"), created("b"), created("a")])
        assert await store.get_task("a") is None and await store.get_task("b") is None

    async def test_a_batch_with_a_bad_payload_writes_nothing(self, store: Store) -> None:
        bad = NewTask("b", [NewEvent("created", {"x": float("nan")})])
        with pytest.raises(PayloadError):
            await bulk(store).create_tasks([created("a"), bad])
        assert await store.get_task("a") is None

    async def test_an_empty_batch_writes_nothing(self, store: Store) -> None:
        await bulk(store).create_tasks([])
        assert await store.list_tasks() == []
