"""Each function, trigger and view a migrated database holds is its file under
`queue/<dialect>/{functions,triggers,views}/`, word for word, and each file is an object of
the database (ADR-0081): the files are the readable truth, the migrations what is applied.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import psycopg

from noeta.backends.stores.postgres import migrate_database
from noeta.backends.stores.schema_snapshot import postgres_definitions, sqlite_definitions
from noeta.backends.stores.sqlite import SqliteStore

QUEUE = Path(__file__).parents[2] / "queue"
KINDS = ("functions", "triggers", "views")
UPDATE = os.environ.get("NOETA_UPDATE_SCHEMA_SNAPSHOT") == "1"


def files_of(folder: Path) -> dict[str, str]:
    return {
        path.relative_to(folder).as_posix(): path.read_text(encoding="utf-8")
        for kind in KINDS
        for path in sorted((folder / kind).glob("*.sql"))
    }


def differences(database: dict[str, str], files: dict[str, str]) -> list[str]:
    """One line per object with no file, file with no object, or file unlike its object."""
    return [
        f"{path}: no file for this object"
        if path not in files
        else f"{path}: no such object in the migrated database"
        if path not in database
        else f"{path}: differs from the migrated database"
        for path in sorted(database.keys() | files.keys())
        if database.get(path) != files.get(path)
    ]


def compare(database: dict[str, str], folder: Path) -> None:
    if UPDATE:
        for path in files_of(folder).keys() - database.keys():
            (folder / path).unlink()
        for path, text in database.items():
            (folder / path).parent.mkdir(exist_ok=True)
            (folder / path).write_text(text, encoding="utf-8")
    found = differences(database, files_of(folder))
    assert not found, (
        f"{folder} and its migrations disagree: a change to an object is an edit of its file "
        "AND a new migration carrying the file's text (queue/README.md)\n" + "\n".join(found)
    )


async def test_every_postgres_function_and_trigger_is_its_file(empty_postgres_url: str) -> None:
    await migrate_database(empty_postgres_url)
    definitions = await asyncio.to_thread(postgres_definitions, empty_postgres_url)
    assert "functions/noeta_fence.sql" in definitions
    assert "triggers/tasks_notify_claimable.sql" in definitions
    compare(definitions, QUEUE / "postgres")


async def test_every_sqlite_trigger_is_its_file(tmp_path: Path) -> None:
    store = await SqliteStore.open(str(tmp_path / "s.db"))
    await store.close()
    definitions = sqlite_definitions(str(tmp_path / "s.db"))
    assert "triggers/tasks_keep_pruned_ids_taken.sql" in definitions
    compare(definitions, QUEUE / "sqlite")


async def test_a_body_unlike_its_file_a_missing_file_and_a_stray_file_are_each_named(
    postgres_url: str,
) -> None:
    await migrate_database(postgres_url)
    files = files_of(QUEUE / "postgres")
    fence = files["functions/noeta_fence.sql"]
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(fence.replace("RAISE", "RAISE WARNING 'x'; RAISE", 1).encode())
    definitions = await asyncio.to_thread(postgres_definitions, postgres_url)
    del files["functions/noeta_deliver.sql"]
    files["functions/noeta_gone.sql"] = "CREATE FUNCTION noeta_gone() …"
    assert differences(definitions, files) == [
        "functions/noeta_deliver.sql: no file for this object",
        "functions/noeta_fence.sql: differs from the migrated database",
        "functions/noeta_gone.sql: no such object in the migrated database",
    ]


async def test_the_unused_noeta_append_events_is_dropped(empty_postgres_url: str) -> None:
    await migrate_database(empty_postgres_url)
    with psycopg.connect(empty_postgres_url, autocommit=True) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_proc WHERE proname = 'noeta_append_events'"
            " AND pronamespace = current_schema()::regnamespace"
        ).fetchone()
    assert row == (0,)
