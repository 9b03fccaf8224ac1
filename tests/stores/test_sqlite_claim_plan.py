"""On sqlite too, the claim finds each queue's first due row in that queue's part of the
claim index: a backlog due in another queue is never walked."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from noeta.backends.stores.sqlite import SqliteStore
from noeta.backends.stores.sqlite.claims import FIND_NEXT_CLAIMABLE, FIND_NEXT_DUE


@pytest.mark.parametrize("query", [FIND_NEXT_CLAIMABLE, FIND_NEXT_DUE])
async def test_the_claim_searches_each_queues_part_of_the_index(tmp_path: Path, query: str) -> None:
    path = str(tmp_path / "store.db")
    await (await SqliteStore.open(path)).close()
    with sqlite3.connect(path) as connection:
        values = {"now": 1, "queues": '["default", "mail"]', "excluding": '["held-here"]'}
        values["offers"] = '["core", "jobs"]'  # a worker with plugins (ADR-0092)
        plan = [row[3] for row in connection.execute(f"EXPLAIN QUERY PLAN {query}", values)]
    searches = [step for step in plan if "tasks_claimable_by_priority" in step]
    assert searches and all("queue=?" in step for step in searches), plan
    assert not any(step.startswith("SCAN tasks") for step in plan), plan
