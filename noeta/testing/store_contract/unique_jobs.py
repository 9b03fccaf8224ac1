"""The contract for unique and debounced jobs (ADR-0093), on a store that offers them: a
key's holder is returned within its window and nothing is written; a debounce replaces
a holder not yet started and never one claimed; a resend of the same task answers the
same; a batch acts as its jobs one after another."""

from __future__ import annotations

import pytest

from noeta.core.ports.store import Store, TaskStatus
from noeta.core.ports.unique_jobs import KeyRule, UniqueJobs
from noeta.testing.store_contract.fixtures import LEASE, created

HOUR = 3600.0


def unique_jobs(store: Store) -> UniqueJobs:
    port = store.capabilities.unique_jobs
    if port is None:
        pytest.skip("this store offers no unique jobs")
    return port


class UniqueJobsContract:
    async def test_a_key_held_in_its_window_returns_its_holder_and_writes_nothing(
        self, store: Store
    ) -> None:
        port = unique_jobs(store)
        rule = KeyRule("job", unique_for=HOUR)
        assert await port.create_unique_task(created("first"), "k", rule) == "first"
        assert await port.create_unique_task(created("second"), "k", rule) == "first"
        assert await store.get_task("second") is None
        assert await port.create_unique_task(created("other"), "k", KeyRule("job2", HOUR)) == (
            "other"
        )
        # Sent again after a lost reply: the same answer, nothing made twice.
        assert await port.create_unique_task(created("first"), "k", rule) == "first"
        assert len(await store.read_log("first")) == 1

    async def test_a_debounce_replaces_a_holder_not_started_and_never_a_claimed_one(
        self, store: Store
    ) -> None:
        port = unique_jobs(store)
        rule = KeyRule("job", debounce=0)
        assert await port.create_unique_task(created("a", "d"), "k", rule) == "a"
        assert await port.create_unique_task(created("b", "d"), "k", rule) == "b"
        replaced = await store.get_task("a")
        assert replaced is not None and replaced.status is TaskStatus.CANCELLED
        finished = (await store.read_log("a"))[-1]
        assert finished.type == "TaskFinished"
        assert finished.data == {
            "v": 1,
            "status": "cancelled",
            "answer": "",
            "error": "superseded by b",
        }
        # A resend of the replaced one's create answers as before: nothing replaced again.
        assert await port.create_unique_task(created("a", "d"), "k", rule) == "a"
        claim = await store.claim("w", ["d"], LEASE)
        assert claim is not None and claim.task_id == "b"
        assert await port.create_unique_task(created("c", "d"), "k", rule) == "c"
        running = await store.get_task("b")
        assert running is not None and running.status is TaskStatus.RUNNING

    async def test_a_batch_acts_as_its_jobs_one_after_another(self, store: Store) -> None:
        port = unique_jobs(store)
        batch = [created(name) for name in ("x1", "y1", "x2")]
        holders = await port.create_unique_tasks(batch, ["x", "y", "x"], KeyRule("job", HOUR))
        assert holders == ["x1", "y1", "x1"]
        assert await store.get_task("x2") is None
        debounced = [created(name) for name in ("z1", "z2")]
        assert await port.create_unique_tasks(debounced, ["z", "z"], KeyRule("job", None, 0)) == [
            "z1",
            "z2",
        ]
        replaced = await store.get_task("z1")
        assert replaced is not None and replaced.status is TaskStatus.CANCELLED
