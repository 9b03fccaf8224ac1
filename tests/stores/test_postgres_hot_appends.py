"""An append's update of its task row can stay HOT: no index of tasks names a column
that every append changes (last_seq, updated_at). One such index makes every append
write a new entry into every index of tasks (a regression bench/scale.py once saw)."""

from __future__ import annotations

import psycopg

from noeta.backends.stores.postgres import migrate_database

# Every append sets these; the status only changes when the task's state does.
CHANGED_BY_EVERY_APPEND = ("last_seq", "updated_at")

INDEXES_OF_TASKS = """
SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid) FROM pg_index
 WHERE indrelid = 'tasks'::regclass
"""


async def test_no_index_of_tasks_names_a_column_every_append_changes(postgres_url: str) -> None:
    await migrate_database(postgres_url)
    async with await psycopg.AsyncConnection.connect(postgres_url) as conn:
        indexes = await (await conn.execute(INDEXES_OF_TASKS)).fetchall()
    assert indexes
    offending = [
        (name, column)
        for name, definition in indexes
        for column in CHANGED_BY_EVERY_APPEND
        if column in definition
    ]
    assert offending == []
