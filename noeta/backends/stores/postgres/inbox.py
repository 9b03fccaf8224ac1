"""The inbox on PostgreSQL: deliveries (deduplicated per task, waking a waiting task, and
for a cancel a task due later) and reading what a task has been sent."""

from __future__ import annotations

from typing import Any

from noeta.backends.stores.postgres.connection import PostgresConnection
from noeta.core.ports import payload
from noeta.core.ports.store import CANCEL_KEY, Delivery, InboxEntry, check_key

# noeta_deliver wakes a waiting task; a cancel also wakes a ready one due later (a delay,
# a model-budget hand-back, a 429 pause), so that it ends now rather than at its due
# time. The deliver runs first (the UPDATE's condition reads it) and holds the row lock;
# a task claimed meanwhile is no longer ready when the UPDATE re-checks the row.
DELIVER = """
WITH delivered AS MATERIALIZED (
    SELECT noeta_deliver(%(task)s, %(key)s, %(payload)s) AS inserted
),
woken AS (
    UPDATE tasks SET claimable_at = clock_timestamp(), updated_at = clock_timestamp()
     WHERE id = %(task)s AND status = 'ready' AND claimable_at > clock_timestamp()
       AND %(key)s = %(cancel_key)s AND (SELECT inserted FROM delivered)
    RETURNING id
)
SELECT inserted, (SELECT count(*) FROM woken) FROM delivered
"""

READ_INBOX = """
SELECT id, task_id, payload, dedupe_key, taken_seq, created_at FROM inbox
 WHERE task_id = %(task)s AND (taken_seq IS NULL OR NOT %(untaken_only)s) ORDER BY id
"""


class PostgresInbox(PostgresConnection):
    """Delivering to a task's inbox and reading it."""

    async def deliver(self, delivery: Delivery) -> bool:
        params = {
            "task": delivery.task_id,
            "key": dedupe_key(delivery),
            "payload": payload.encode(delivery.payload),
            "cancel_key": CANCEL_KEY,
        }
        row = await self._write(DELIVER, params, task_id=delivery.task_id)
        return bool(row and row[0])

    async def read_inbox(self, task_id: str, *, untaken_only: bool = True) -> list[InboxEntry]:
        rows = await self._read(READ_INBOX, {"task": task_id, "untaken_only": untaken_only})
        return [inbox_entry(row) for row in rows]


def inbox_entry(row: tuple[Any, ...]) -> InboxEntry:
    """An inbox row as READ_INBOX returns it."""
    return InboxEntry(row[0], row[1], payload.decode(row[2]), row[3], row[4], row[5])


def dedupe_key(delivery: Delivery) -> str | None:
    """The delivery's checked dedupe key (its task id checked too)."""
    check_key("task id", delivery.task_id)
    return None if delivery.dedupe_key is None else check_key("dedupe key", delivery.dedupe_key)
