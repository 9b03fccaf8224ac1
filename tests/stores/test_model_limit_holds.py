"""A slot held for a task (ADR-0075) goes when the task finishes or is pruned: a hold
row outliving its task would stay for ever, and be taken by a task re-using the id."""

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
from noeta.testing.store_contract.fixtures import LEASE, created


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


def run_sql(store_url: str, statement: str) -> list[tuple[object, ...]]:
    """A statement on the store's database, outside the store (the holds have no reader)."""
    if store_url.startswith("sqlite:///"):
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as connection:
            return connection.execute(statement).fetchall()
    with psycopg.connect(store_url, autocommit=True) as connection:
        cursor = connection.execute(statement)
        return cursor.fetchall() if cursor.description else []


def hold_slot(store_url: str, task_id: str) -> None:
    # As a refused ModelCalled append leaves it; `until` is any time in the store's form.
    until = "1" if store_url.startswith("sqlite:///") else "clock_timestamp()"
    columns = "(task_id, until, limit_key)"
    run_sql(
        store_url, f"INSERT INTO model_limit_holds {columns} VALUES ('{task_id}', {until}, 'p/*')"
    )


def holds(store_url: str) -> list[str]:
    return [str(row[0]) for row in run_sql(store_url, "SELECT task_id FROM model_limit_holds")]


async def test_a_finished_tasks_held_slot_is_dropped(store: Store, store_url: str) -> None:
    assert await store.create_task(created("t"))
    hold_slot(store_url, "t")
    claim = await store.claim_task("w", "t", LEASE)
    assert claim is not None
    await store.append(claim, 1, [NewEvent("cancelled", {})], next_state=Finish())
    assert holds(store_url) == []


async def test_a_pruned_tasks_held_slot_is_dropped(store: Store, store_url: str) -> None:
    assert await store.create_task(created("t"))
    claim = await store.claim_task("w", "t", LEASE)
    assert claim is not None
    await store.append(claim, 1, [NewEvent("done", {})], next_state=Finish())
    hold_slot(store_url, "t")  # left by a noeta from before holds were dropped at a finish
    assert isinstance(store, Pruning)
    assert (await store.prune_finished(timedelta(0))).tasks == 1
    assert holds(store_url) == []
