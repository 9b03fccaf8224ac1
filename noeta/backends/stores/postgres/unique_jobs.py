"""Unique and debounced jobs on PostgreSQL: `noeta_create_unique_task(s)`
(queue/postgres/functions/) lock the key's row of job_unique_keys, then create or not."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from noeta.backends.stores.postgres.appends import create_params, encode_task
from noeta.backends.stores.postgres.connection import PostgresConnection
from noeta.core.errors import Conflict
from noeta.core.ports.bulk import check_distinct_ids
from noeta.core.ports.store import NewTask, check_key
from noeta.core.ports.unique_jobs import KeyRule

CREATE_UNIQUE_TASK = """
SELECT noeta_create_unique_task(
    %(id)s, %(queue)s, %(ready_at)s, %(types)s::text[], %(data)s::text[], %(key)s,
    %(priority)s, %(job)s, %(unique_key)s, %(unique_for)s::interval, %(debounce)s::interval)
"""

CREATE_UNIQUE_TASKS = """
SELECT noeta_create_unique_tasks(
    %(ids)s::text[], %(queues)s::text[], %(ready)s::timestamptz[], %(counts)s::int[],
    %(types)s::text[], %(data)s::text[], %(keys)s::text[], %(priorities)s::int[], %(job)s,
    %(unique_keys)s::text[], %(unique_for)s::interval, %(debounce)s::interval)
"""


class PostgresUniqueJobs(PostgresConnection):
    """Creating a job unless another holds its unique key."""

    async def create_unique_task(self, task: NewTask, key: str, rule: KeyRule) -> str:
        params = {
            **create_params(task),
            "unique_key": check_key("unique key", key),
            **_rule(rule),
        }
        row = await self._write(CREATE_UNIQUE_TASK, params, task_id=task.id)
        assert row is not None
        holder: str = row[0]
        return holder

    async def create_unique_tasks(
        self, tasks: Sequence[NewTask], keys: Sequence[str], rule: KeyRule
    ) -> list[str]:
        if not tasks:
            return []
        check_distinct_ids(tasks)
        types: list[str] = []
        data: list[str] = []
        for task in tasks:
            task_types, task_data = encode_task(task)
            types += task_types
            data += task_data
        params = {
            "ids": [task.id for task in tasks],
            "queues": [task.queue for task in tasks],
            "ready": [task.ready_at for task in tasks],
            "counts": [len(task.events) for task in tasks],
            "types": types,
            "data": data,
            "keys": [task.concurrency_key for task in tasks],
            "priorities": [task.priority for task in tasks],
            "unique_keys": [check_key("unique key", key) for key in keys],
            **_rule(rule),
        }
        try:
            row = await self._write(CREATE_UNIQUE_TASKS, params)
        except Conflict as error:
            # The function names the taken id as its message.
            raise Conflict(error.reason, "the id is taken (by a task, or a pruned one)") from None
        assert row is not None
        holders: list[str] = row[0]
        return holders


def _rule(rule: KeyRule) -> dict[str, object]:
    return {
        "job": rule.job,
        "unique_for": None if rule.unique_for is None else timedelta(seconds=rule.unique_for),
        "debounce": None if rule.debounce is None else timedelta(seconds=rule.debounce),
    }
