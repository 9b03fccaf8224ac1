"""The store contract against sqlite (a fresh file per test), and what only sqlite has."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from noeta.backends.stores.migrations import load_migrations
from noeta.backends.stores.sqlite import SqliteStore
from noeta.core.errors import SchemaMismatch, StoreUnavailable
from noeta.testing.store_contract import StoreContract, created


class TestSqliteStore(StoreContract):
    @pytest.fixture
    def store_url(self, tmp_path: Path) -> str:
        return f"sqlite:///{tmp_path / 'noeta.db'}"


async def test_migrations_are_recorded_once(tmp_path: Path) -> None:
    path = str(tmp_path / "noeta.db")
    with pytest.raises(SchemaMismatch):
        await SqliteStore.open(path, migrate=False)
    store = await SqliteStore.open(path)
    assert await store.migrate() == []
    await store.close()
    await (await SqliteStore.open(path, migrate=False)).close()
    with sqlite3.connect(path) as connection:
        rows = connection.execute("SELECT version, name FROM noeta_migrations").fetchall()
    known = load_migrations("sqlite")
    assert rows == [(migration.version, migration.name) for migration in known]
    assert rows[:2] == [(1, "create_tasks"), (2, "create_events")]


async def test_a_locked_file_is_unavailable_not_a_hang(tmp_path: Path) -> None:
    path = str(tmp_path / "noeta.db")
    await (await SqliteStore.open(path)).close()
    store = await SqliteStore.open(path, busy_timeout_seconds=0.1)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreUnavailable, match="locked"):
            await store.create_task(created("a"))
        other.execute("ROLLBACK")
        assert await store.create_task(created("a"))
    finally:
        other.close()
        await store.close()


async def test_a_claim_ahead_takes_nothing_here(tmp_path: Path) -> None:
    """sqlite has no round trip for a claim ahead to save (ADR-0158): it claims nothing,
    and the task stays for the claim loop's own claim."""
    store = await SqliteStore.open(str(tmp_path / "noeta.db"))
    try:
        assert await store.create_task(created("t1"))
        ahead = await store.claim_and_load(
            "w", ["default"], 30, limit=4, snapshot_version="v", ahead=True
        )
        assert ahead == []
        claimed = await store.claim_and_load("w", ["default"], 30, limit=4, snapshot_version="v")
        assert [each.claim.task_id for each in claimed] == ["t1"]
    finally:
        await store.close()
