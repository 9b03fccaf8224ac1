"""The contract for a task created started (`NewTask.started`, ADR-0117): the append that
creates it claims it for its worker at epoch 1 and writes its start, in the same commit;
nobody else claims it while the lease holds; in a queue with settings the whole append is
refused (NotStarted) and nothing is written."""

from __future__ import annotations

import pytest

from noeta.core.errors import NotStarted
from noeta.core.ports.queue_settings import QueueChange, queue_settings_store
from noeta.core.ports.store import (
    Claim,
    NewEvent,
    NewTask,
    StartedBy,
    Store,
    TaskStatus,
    Wait,
)
from noeta.testing.store_contract.fixtures import LEASE, created

START = [NewEvent("PluginsPinned", {"pins": [["jobs", "m", "1", "h"]]}), NewEvent("began", {})]


def started(task_id: str, queue: str = "default") -> NewTask:
    return NewTask(
        task_id,
        [NewEvent("created", {})],
        queue,
        continued=True,
        started=StartedBy("w", LEASE, START, ("jobs",)),
    )


class StartedTaskContract:
    """A task created claimed and started by the appending worker."""

    async def test_an_append_creates_a_task_claimed_and_started_by_its_worker(
        self, store: Store
    ) -> None:
        assert await store.create_task(created("parent"))
        parent = await store.claim_task("w", "parent", LEASE)
        assert parent is not None
        await store.append(parent, 1, [NewEvent("launched", {})], new_tasks=[started("child")],
                           next_state=Wait())  # fmt: skip
        record = await store.get_task("child")
        assert record is not None and record.status is TaskStatus.RUNNING
        assert record.owner == "w" and record.owner_epoch == 1 and record.last_seq == 3
        log = await store.read_log("child")
        assert [(e.type, e.epoch, e.owner) for e in log] == [
            ("created", 0, None),
            ("PluginsPinned", 1, "w"),
            ("began", 1, "w"),
        ]
        assert await store.claim("other", ["default"], LEASE) is None  # held by its lease
        claim = Claim("child", "w", 1, record.lease_until or parent.lease_until)
        assert await store.append(claim, 3, [NewEvent("ended", {})]) == 4  # its fence holds

    async def test_in_a_queue_with_settings_the_append_is_refused_whole(self, store: Store) -> None:
        await queue_settings_store(store).set_queue("limited", QueueChange(concurrency=5))
        assert await store.create_task(created("parent"))
        parent = await store.claim_task("w", "parent", LEASE)
        assert parent is not None
        with pytest.raises(NotStarted):
            await store.append(parent, 1, [NewEvent("launched", {})],
                               new_tasks=[started("child", "limited")])  # fmt: skip
        assert await store.get_task("child") is None
        assert [e.type for e in await store.read_log("parent")] == ["created"]
