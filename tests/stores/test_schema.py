"""The migrations build exactly the committed schema snapshot, and run safely twice at once."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import psycopg
import pytest

from noeta.backends.stores import migrations
from noeta.backends.stores.postgres import check_schema, migrate_database
from noeta.backends.stores.schema_snapshot import describe_postgres, describe_sqlite
from noeta.backends.stores.sqlite import SqliteStore
from noeta.core.errors import SchemaMismatch

SNAPSHOTS = Path(__file__).parents[2] / "queue" / "schema"
UPDATE = os.environ.get("NOETA_UPDATE_SCHEMA_SNAPSHOT") == "1"


def compare(actual: str, snapshot: Path) -> None:
    if UPDATE:
        snapshot.write_text(actual)
    assert actual == snapshot.read_text(), (
        f"the migrations no longer build {snapshot.name}; if the change is intended, add a "
        "migration and re-run with NOETA_UPDATE_SCHEMA_SNAPSHOT=1"
    )


async def test_postgres_migrations_build_the_snapshot(empty_postgres_url: str) -> None:
    await migrate_database(empty_postgres_url)
    compare(
        await asyncio.to_thread(describe_postgres, empty_postgres_url), SNAPSHOTS / "postgres.txt"
    )


async def test_sqlite_migrations_build_the_snapshot(tmp_path: Path) -> None:
    store = await SqliteStore.open(str(tmp_path / "s.db"))
    await store.close()
    compare(describe_sqlite(str(tmp_path / "s.db")), SNAPSHOTS / "sqlite.txt")


def test_both_dialects_have_the_same_migrations() -> None:
    postgres = [(m.version, m.name) for m in migrations.load_migrations("postgres")]
    sqlite = [(m.version, m.name) for m in migrations.load_migrations("sqlite")]
    assert postgres == sqlite


async def test_migrating_twice_at_once_applies_each_migration_once(empty_postgres_url: str) -> None:
    first, second = await asyncio.gather(
        migrate_database(empty_postgres_url), migrate_database(empty_postgres_url)
    )
    assert sorted(m.version for m in first + second) == [
        m.version for m in migrations.load_migrations("postgres")
    ]
    assert await migrate_database(empty_postgres_url) == []
    await check_schema(empty_postgres_url)


async def test_a_database_migrated_by_a_newer_noeta_is_refused(postgres_url: str) -> None:
    await migrate_database(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute("INSERT INTO noeta_migrations (version, name) VALUES (999, 'future')")
    with pytest.raises(SchemaMismatch, match="version 999, newer than this noeta"):
        await check_schema(postgres_url)
    with pytest.raises(SchemaMismatch, match="upgrade noeta"):
        await migrate_database(postgres_url)


async def test_an_unmigrated_database_is_refused_without_migrate(empty_postgres_url: str) -> None:
    with pytest.raises(SchemaMismatch, match="run `noeta db migrate`"):
        await check_schema(empty_postgres_url)
