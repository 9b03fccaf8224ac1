"""The text search on a server without pg_trgm (ADR-0102): the migration's attempt to
create the extension fails (here for real: a database without it and a role that may not
create it), the store is made without the trigram index, a search reads the table whole
and finds the same tasks, and `index_search` says once that the server has no pg_trgm."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from noeta.backends.stores import open_store
from noeta.core.ports.store_views import StoreViews
from tests.web.test_text_search import fill, ids, some_tasks


@pytest.fixture
def unprivileged_url(database_url: str) -> Iterator[str]:
    """A schema of a fresh database, as a role that owns the schema but may not create an
    extension (no CREATE on the database): the migration cannot have pg_trgm."""
    role = f"r_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(database_url, autocommit=True) as admin:
        found = admin.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'")
        assert found.fetchone() is None  # a database of its own: no extension yet
        admin.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(role)))
        admin.execute(sql.SQL("CREATE SCHEMA noeta AUTHORIZATION {}").format(sql.Identifier(role)))
    options = conninfo_to_dict(database_url).get("options") or ""
    yield make_conninfo(database_url, options=f"{options} -c search_path=noeta -c role={role}")
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute("DROP SCHEMA noeta CASCADE")
        admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


async def test_a_search_without_pg_trgm_reads_the_table_whole_and_finds_the_same(
    unprivileged_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = await open_store(unprivileged_url, migrate=True)
    try:
        assert isinstance(store, StoreViews)
        store.search_settle = timedelta(0)  # type: ignore[attr-defined]
        with psycopg.connect(unprivileged_url) as connection:
            index = connection.execute("SELECT to_regclass('task_search_trigrams')").fetchone()
            extension = connection.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'")
            assert index == (None,) and extension.fetchone() is None
        await some_tasks(store)
        with caplog.at_level(logging.WARNING, logger="noeta.store"):
            await fill(store)
            await fill(store)
        said = [r.getMessage() for r in caplog.records if "pg_trgm" in r.getMessage()]
        assert said == [
            "text search: no pg_trgm on this server (or no right to create it), so a search "
            "reads the whole task_search table: slower at a million tasks"
        ]
        assert await ids(store, "bad operand") == ["j-add"]
        assert await ids(store, "ize_im") == ["j-resize"]
        assert await ids(store, "quarterly REPORT") == ["a-quarter"]
        assert await ids(store, "0%") == ["a-quarter"]
        assert await ids(store, "nowhere") == []
        assert await store.count_tasks(text="a-p") == 1
        with psycopg.connect(unprivileged_url) as connection:  # read from the table
            rows = connection.execute("SELECT count(*) FROM task_search").fetchone()
        assert rows == (4,)
    finally:
        await store.close()
