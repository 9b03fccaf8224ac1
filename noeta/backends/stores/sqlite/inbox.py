"""The inbox on sqlite: deliveries (deduplicated per task, waking a waiting task, and for
a cancel a task due later) and reading what a task has been sent."""

from __future__ import annotations

import sqlite3

from noeta.backends.stores.sqlite.connection import SqliteConnection
from noeta.backends.stores.sqlite.encoding import EncodedDelivery, encode_delivery, from_micros
from noeta.core.errors import UnknownTask
from noeta.core.ports.payload import decode
from noeta.core.ports.store import CANCEL_KEY, Delivery, InboxEntry

SELECT_TASK_STATUS = "SELECT status, wake_prefix FROM tasks WHERE id = ?"
INSERT_INBOX_ENTRY = """
INSERT INTO inbox (task_id, dedupe_key, payload, created_at) VALUES (?, ?, ?, ?)
ON CONFLICT (task_id, dedupe_key) DO NOTHING"""
MAKE_CLAIMABLE_NOW = """
UPDATE tasks SET claimable_at = min(coalesce(claimable_at, :now), :now), updated_at = :now
 WHERE id = :task_id"""
READ_UNTAKEN_INBOX = """
SELECT id, task_id, payload, dedupe_key, taken_seq, created_at FROM inbox
 WHERE task_id = ? AND taken_seq IS NULL ORDER BY id"""
READ_WHOLE_INBOX = """
SELECT id, task_id, payload, dedupe_key, taken_seq, created_at FROM inbox
 WHERE task_id = ? ORDER BY id"""


class SqliteInbox(SqliteConnection):
    """Delivering to a task's inbox and reading it."""

    async def deliver(self, delivery: Delivery) -> bool:
        encoded = encode_delivery(delivery)
        return await self._run(self._write, lambda c, now: insert_delivery(c, encoded, now))

    async def read_inbox(self, task_id: str, *, untaken_only: bool = True) -> list[InboxEntry]:
        query = READ_UNTAKEN_INBOX if untaken_only else READ_WHOLE_INBOX
        rows = await self._run(self._read_all, query, (task_id,))
        return [
            InboxEntry(entry_id, task, decode(payload), key, taken, from_micros(created))
            for entry_id, task, payload, key, taken, created in rows
        ]


def insert_delivery(connection: sqlite3.Connection, delivery: EncodedDelivery, now: int) -> bool:
    """Insert one inbox entry (unless its key is taken) and wake its task if it waits for it."""
    row = connection.execute(SELECT_TASK_STATUS, (delivery.task_id,)).fetchone()
    if row is None:
        raise UnknownTask(delivery.task_id)
    values = (delivery.task_id, delivery.dedupe_key, delivery.payload, now)
    inserted = bool(connection.execute(INSERT_INBOX_ENTRY, values).rowcount == 1)
    status, prefix = row
    key = delivery.dedupe_key or ""
    wakes = prefix is None or key.startswith(prefix) or key == CANCEL_KEY
    # A cancel also wakes a ready task due later (a delay, a budget hand-back, a 429
    # pause): it ends now, not at its due time.
    cancels_a_later_task = status == "ready" and key == CANCEL_KEY
    if inserted and ((status == "waiting" and wakes) or cancels_a_later_task):
        connection.execute(MAKE_CLAIMABLE_NOW, {"now": now, "task_id": delivery.task_id})
    return inserted
