"""Bulk creation, a port beside `Store`: a batch of tasks in one transaction, all or none.

A producer with many tasks pays one round trip and one commit for the whole batch
instead of one per task (ADR-0065).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from noeta.core.errors import PayloadError
from noeta.core.ports.store_values import NewTask


@runtime_checkable
class BulkCreate(Protocol):
    async def create_tasks(self, tasks: Sequence[NewTask]) -> None:
        """Create every task with its first events, in one transaction, or none of them.

        Raises `Conflict` naming (as its `task_id`) the first task whose id is taken, by
        a task or by a pruned one (ADR-0066); nothing of the batch is written then.
        """
        ...

    async def taken_ids(self, ids: Sequence[str]) -> set[str]:
        """Those of `ids` a create would find taken now: by a task, or by a pruned one."""
        ...


def check_distinct_ids(tasks: Sequence[NewTask]) -> None:
    """Refuse a batch that gives one id twice, naming the second (its index from 0)."""
    seen: dict[str, int] = {}
    for index, task in enumerate(tasks):
        if task.id in seen:
            raise PayloadError(
                f"task {index} of the batch (id {task.id!r}) has the id of task "
                f"{seen[task.id]}; nothing of the batch was written"
            )
        seen[task.id] = index
