"""A real PostgreSQL for tests: `NOETA_TEST_POSTGRES_DSN` if set, else an embedded server.

Each test gets its own schema (via the connection's search_path), so tests never see
each other's rows and need no cleanup order.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from noeta.backends.stores.embedded import EmbeddedPostgres

TEST_DSN_ENV = "NOETA_TEST_POSTGRES_DSN"

# fsync off is safe for tests (no acknowledged commit is lost by an immediate shutdown);
# synchronous_commit off is not, and is never used (POSTGRES-FACTS.md).
# A short deadlock_timeout makes the deadlock tests quick; it changes no outcome.
TEST_SETTINGS = {
    "fsync": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "deadlock_timeout": "100ms",
}


class TestPostgres:
    """The server the test session uses, and fresh schemas on it."""

    def __init__(self) -> None:
        self.embedded: EmbeddedPostgres | None = None
        dsn = os.environ.get(TEST_DSN_ENV)
        if not dsn:
            root = Path(tempfile.mkdtemp(prefix="noeta-test-pg-"))
            self.embedded = EmbeddedPostgres(root, settings=TEST_SETTINGS)
            dsn = self.embedded.start()
        self.admin_dsn = dsn

    def new_schema(self) -> str:
        """Create an empty schema and return a DSN whose search_path points at it."""
        schema = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(self.admin_dsn, autocommit=True) as connection:
            connection.execute(f'CREATE SCHEMA "{schema}"')
        return with_search_path(self.admin_dsn, schema)

    def new_database(self) -> str:
        """Create an empty database (for a test that changes database-wide settings) and
        return its DSN; `drop_database` removes it."""
        name = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(self.admin_dsn, autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return make_conninfo(self.admin_dsn, dbname=name)

    def drop_database(self, dsn: str) -> None:
        name = conninfo_to_dict(dsn)["dbname"]
        with psycopg.connect(self.admin_dsn, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def set_read_only(self, dsn: str, read_only: bool) -> None:
        """Make a database read-only for every session (or writable again) and end the
        sessions it has, as a failover onto a server that cannot take writes does."""
        name = conninfo_to_dict(dsn)["dbname"]
        change = "SET default_transaction_read_only = on" if read_only else "RESET ALL"
        with psycopg.connect(self.admin_dsn, autocommit=True) as connection:
            connection.execute(f'ALTER DATABASE "{name}" {change}')
        self.end_sessions(dsn)

    def end_sessions(self, dsn: str, application_name: str | None = None) -> int:
        """pg_terminate_backend every session on the DSN's database (of one application,
        if named) but our own; returns how many were ended."""
        name = conninfo_to_dict(dsn)["dbname"]
        query = (
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()"
            " AND (%s::text IS NULL OR application_name = %s)"
        )
        with psycopg.connect(self.admin_dsn, autocommit=True) as connection:
            row = connection.execute(query, (name, application_name, application_name)).fetchone()
        return int(row[0]) if row else 0

    def stop(self) -> None:
        if self.embedded is not None:
            self.embedded.stop(mode="immediate")
            # Every test session made one; left behind, they filled /tmp by tens of MB a run.
            shutil.rmtree(self.embedded.root, ignore_errors=True)


def with_search_path(dsn: str, schema: str) -> str:
    options = conninfo_to_dict(dsn).get("options") or ""
    return make_conninfo(dsn, options=f"{options} -c search_path={schema}".strip())
