"""The prune's family rule on both stores (ADR-0113): a finished task with a live subtask
(or a subtask of one) is kept, by the prune by id and the prune by age alike; one whose
live descendants are only its retry, or a subtask of its retry, is pruned. A subtask whose
call id reads like a retry (`<id>.retry-1.<n>`) is still a subtask."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from noeta.backends.stores import open_store
from noeta.core.ports.retention import Pruning
from noeta.core.ports.store import NewTask, Store
from noeta.core.rules import events
from noeta.core.rules.task_id import in_retry_line, retry_task_id
from tests.web.conftest import encoded
from tests.web.test_failure_groups import ended

# Each finished task, the live task named after it, and whether it keeps it.
FAMILIES = [
    ("src", "src.retry-1", False),  # its retry
    ("again", "again.retry-12", False),  # a later retry (`retry_task_id` of a retry)
    ("deep", "deep.retry-2.toolu_01.1", False),  # a subtask of its retry
    ("parent", "parent.toolu_01.1", True),  # its subtask
    ("odd", "odd.retry-1.1", True),  # its subtask, whose call id reads retry-1
    ("grand", "grand.toolu_01.1.toolu_02.3", True),  # its subtask's subtask
]


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    store = await open_store(store_url, migrate=True)
    yield store
    await store.close()


def pruning_of(store: Store) -> Pruning:
    pruning = store.capabilities.pruning
    assert pruning is not None
    return pruning


async def families(store: Store, prefix: str) -> None:
    opening = encoded(events.TaskCreated(model="scripted:x.yaml", prompt="look"))
    for finished, live, _ in FAMILIES:
        await ended(store, f"{prefix}{finished}", "llm_error: x")  # type: ignore[arg-type]
        assert await store.create_task(NewTask(f"{prefix}{live}", opening))


async def kept(store: Store, prefix: str) -> list[str]:
    return [
        finished
        for finished, _, _ in FAMILIES
        if await store.get_task(f"{prefix}{finished}") is not None
    ]


KEPT = [finished for finished, _, keeps in FAMILIES if keeps]


async def test_a_live_retry_keeps_no_task_from_a_prune_by_id(store: Store) -> None:
    await families(store, "i-")
    ids = [f"i-{finished}" for finished, _, _ in FAMILIES]
    pruned = await pruning_of(store).prune_tasks(ids)
    assert pruned.tasks == len(FAMILIES) - len(KEPT)
    assert await kept(store, "i-") == KEPT
    for _, live, _ in FAMILIES:  # the live ones are untouched
        assert await store.get_task(f"i-{live}") is not None


async def test_a_live_retry_keeps_no_task_from_a_prune_by_age(store: Store) -> None:
    await families(store, "a-")
    await pruning_of(store).prune_finished(timedelta(0))
    assert await kept(store, "a-") == KEPT


def test_the_rule_in_python_reads_the_ids_as_the_sql_does() -> None:
    for finished, live, keeps in FAMILIES:
        assert in_retry_line(finished, live) is not keeps
    assert in_retry_line("src", retry_task_id("src"))
    assert in_retry_line("src", retry_task_id(retry_task_id("src")))
    assert not in_retry_line("src", "src.retry-0")  # no retry's number: a root of its own
    assert not in_retry_line("src", "srcx.retry-1")
