"""`postgres_url` is a schema exactly as a real migration makes it, made by replaying one
captured dump; `empty_postgres_url` is empty, for the tests of migrating itself.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import psycopg
import pytest

from noeta.backends.stores.postgres import PostgresStore, check_schema, migrate_database
from noeta.backends.stores.schema_snapshot import describe_postgres, postgres_definitions
from noeta.core.errors import SchemaMismatch
from noeta.testing.command_line import store_in_environment

if TYPE_CHECKING:
    from noeta.testing.postgres import TestPostgres

# What the schema snapshot leaves out, and a replay could still get wrong: privileges,
# storage options, persistence, trigger states, sequences, column storage and order.
CATALOG_DETAILS = """
SELECT 'relation', c.relname, c.relkind::text, coalesce(c.relacl::text, ''),
       coalesce(array_to_string(c.reloptions, ','), ''),
       c.relpersistence::text || c.relreplident::text || c.relrowsecurity::text
  FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace
UNION ALL
SELECT 'column', c.relname || '.' || a.attname, format_type(a.atttypid, a.atttypmod),
       coalesce(a.attacl::text, ''), a.attstorage::text || a.attcompression::text,
       a.attidentity::text || a.attgenerated::text || a.attnotnull::text
  FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
 WHERE c.relnamespace = current_schema()::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'function', p.oid::regprocedure::text, p.prokind::text, coalesce(p.proacl::text, ''),
       coalesce(array_to_string(p.proconfig, ','), ''),
       p.provolatile::text || p.proparallel::text || p.prosecdef::text || p.proleakproof::text
  FROM pg_proc p WHERE p.pronamespace = current_schema()::regnamespace
UNION ALL
SELECT 'trigger', c.relname || '.' || t.tgname, t.tgenabled::text, '', '', ''
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
 WHERE c.relnamespace = current_schema()::regnamespace AND NOT t.tgisinternal
UNION ALL
SELECT 'sequence', c.relname, s.seqtypid::regtype::text,
       concat_ws(' ', s.seqstart, s.seqincrement, s.seqmin, s.seqmax, s.seqcache, s.seqcycle),
       coalesce(pg_describe_object(d.refclassid, d.refobjid, d.refobjsubid), ''), ''
  FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
  LEFT JOIN pg_depend d ON d.objid = c.oid AND d.deptype = 'a'
 WHERE c.relnamespace = current_schema()::regnamespace
UNION ALL
SELECT 'comment', c.relname, coalesce(obj_description(c.oid, 'pg_class'), ''), '', '', ''
  FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace
 ORDER BY 1, 2, 3, 4
"""
APPLIED = "SELECT version, name FROM noeta_migrations ORDER BY version"


def everything_about(dsn: str) -> dict[str, object]:
    """The schema snapshot's rendering, every object's definition, the catalog details
    and the migrations a store will read as applied: all without the schema's name."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        schema = str(connection.execute("SELECT current_schema()").fetchone())
        details = connection.execute(CATALOG_DETAILS).fetchall()
        applied = connection.execute(APPLIED).fetchall()
    return {
        "snapshot": describe_postgres(dsn),
        "definitions": postgres_definitions(dsn),
        "details": [
            tuple(str(value).replace(schema, "<schema>") for value in row) for row in details
        ],
        "applied": applied,
    }


def differences(replayed: dict[str, object], migrated: dict[str, object]) -> list[str]:
    return [part for part in migrated if replayed[part] != migrated[part]]


async def test_postgres_url_holds_what_a_real_migration_makes(
    postgres_url: str, empty_postgres_url: str
) -> None:
    assert await migrate_database(empty_postgres_url) != []  # the real one, on an empty schema
    migrated = await asyncio.to_thread(everything_about, empty_postgres_url)
    replayed = await asyncio.to_thread(everything_about, postgres_url)
    assert migrated["details"] and migrated["applied"]
    assert differences(replayed, migrated) == []


async def test_the_comparison_sees_a_dropped_index_and_a_revoked_grant(
    postgres_server: TestPostgres,
) -> None:
    first = postgres_server.new_migrated_schema()
    second = postgres_server.new_migrated_schema()
    with psycopg.connect(second, autocommit=True) as connection:
        connection.execute("DROP INDEX tasks_by_creation")
        connection.execute("GRANT SELECT ON noeta_migrations TO PUBLIC")
    found = differences(
        await asyncio.to_thread(everything_about, second),
        await asyncio.to_thread(everything_about, first),
    )
    assert found == ["snapshot", "details"]


async def test_a_store_opens_postgres_url_as_current_and_migrating_finds_nothing_to_do(
    postgres_url: str,
) -> None:
    store = await PostgresStore.open(postgres_url)  # checks the schema, migrates nothing
    await store.close()
    assert await migrate_database(postgres_url) == []


def test_a_noeta_process_finds_postgres_url_current(postgres_url: str) -> None:
    given, environment = store_in_environment(["db", "migrate", "--store", postgres_url], {})
    result = subprocess.run(
        [sys.executable, "-m", "noeta", *given],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **environment},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "the schema is up to date"


async def test_empty_postgres_url_is_an_empty_schema(empty_postgres_url: str) -> None:
    with psycopg.connect(empty_postgres_url, autocommit=True) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_class WHERE relnamespace = current_schema()::regnamespace"
        ).fetchone()
    assert row == (0,)
    with pytest.raises(SchemaMismatch, match="run `noeta db migrate`"):
        await check_schema(empty_postgres_url)


def test_schemas_after_the_first_are_replayed_not_migrated(
    postgres_server: TestPostgres,
) -> None:
    postgres_server.new_migrated_schema()  # the first of the session captures the script
    if not postgres_server.replays_a_dump:
        pytest.skip("no pg_dump can read this server: every schema is migrated for real")
    before = dict(postgres_server.schemas_made)
    postgres_server.new_migrated_schema()
    after = postgres_server.schemas_made
    assert (after["replayed"] - before["replayed"], after["migrated"] - before["migrated"]) == (
        1,
        0,
    )
