"""`noeta prune` takes a unique or debounced job's key (`job_unique_keys`, ADR-0093) with
the job, in the same batch: a key whose job is pruned holds nothing (a later enqueue with
it makes a new job), and its row would otherwise stay for ever. A key whose job is kept
(live, or finished too recently) stays."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from noeta.backends.stores import open_store
from noeta.core.ports.retention import Pruning
from noeta.core.ports.store import Finish, NewEvent, Store
from noeta.core.ports.unique_jobs import KeyRule
from noeta.testing.store_contract.fixtures import LEASE, created

RULE = KeyRule("resize", unique_for=3600)


@pytest.fixture(params=["postgres", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    return f"sqlite:///{tmp_path / 's.db'}"


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    store = await open_store(store_url, migrate=True)
    yield store
    await store.close()


def keys(store_url: str) -> list[tuple[str, str]]:
    """(key, holder) of every row of job_unique_keys: no store call reads them all."""
    query = "SELECT unique_key, task_id FROM job_unique_keys ORDER BY unique_key"
    if store_url.startswith("sqlite:///"):
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as connection:
            return [tuple(row) for row in connection.execute(query).fetchall()]
    with psycopg.connect(store_url, autocommit=True) as connection:
        return [tuple(row) for row in connection.execute(query).fetchall()]


async def finish(store: Store, task_id: str) -> None:
    claim = await store.claim_task("w", task_id, LEASE)
    assert claim is not None
    await store.append(claim, 1, [NewEvent("done", {})], next_state=Finish())


async def test_a_pruned_jobs_key_goes_with_it_and_a_kept_jobs_stays(
    store: Store, store_url: str
) -> None:
    unique = store.capabilities.unique_jobs
    assert unique is not None and isinstance(store, Pruning)
    assert await unique.create_unique_task(created("done-job"), "a", RULE) == "done-job"
    assert await unique.create_unique_task(created("live-job"), "b", RULE) == "live-job"
    await finish(store, "done-job")
    assert keys(store_url) == [("a", "done-job"), ("b", "live-job")]
    assert (await store.prune_finished(timedelta(0))).tasks == 1
    assert keys(store_url) == [("b", "live-job")]
    # As before the prune took the row: the key held nothing once its job was gone.
    assert await unique.create_unique_task(created("next-job"), "a", RULE) == "next-job"
    assert keys(store_url) == [("a", "next-job"), ("b", "live-job")]
