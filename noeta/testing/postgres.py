"""A real PostgreSQL for tests: `NOETA_TEST_POSTGRES_DSN` if set, else an embedded server.

Each test gets its own schema (via the connection's search_path), so tests never see
each other's rows and need no cleanup order: migrated by replaying one real migration's
dump (migrated_schema.py), or empty for a test of migrating itself.
"""

from __future__ import annotations

import os
import shutil
import threading
import uuid

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from noeta.backends.stores.embedded import EmbeddedPostgres, make_home
from noeta.testing.migrated_schema import MigratedSchemaScript, migrate_for_real, with_search_path

__all__ = ["SCHEMA_MAKER", "TEST_DSN_ENV", "TEST_SETTINGS", "TestPostgres", "with_search_path"]

TEST_DSN_ENV = "NOETA_TEST_POSTGRES_DSN"
SCHEMA_MAKER = "noeta-test-schemas"  # the application_name of the connection making schemas

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
            self.embedded = EmbeddedPostgres(make_home("noeta-test-pg-"), settings=TEST_SETTINGS)
            dsn = self.embedded.start()
        self.admin_dsn = dsn
        self._script: MigratedSchemaScript | None = None
        self._schemas: psycopg.Connection[tuple[object, ...]] | None = None
        self._schemas_lock = threading.Lock()  # the script is captured once; one connection
        self.schemas_made = {"empty": 0, "replayed": 0, "migrated": 0}

    def new_schema(self) -> str:
        """Create an empty schema and return a DSN whose search_path points at it."""
        with self._schemas_lock:
            schema = self._create_schema_locked(None)
            self.schemas_made["empty"] += 1
        return with_search_path(self.admin_dsn, schema)

    def new_migrated_schema(self) -> str:
        """A new schema holding what every migration makes, noeta_migrations rows included
        (a store opened on it finds it current); its DSN. One round trip: the script
        captured from the session's first real migration (migrated_schema.py)."""
        with self._schemas_lock:
            if self._script is None:
                schema = self._create_schema_locked(None)
                self._script = MigratedSchemaScript.capture(self.admin_dsn, schema)
                self.schemas_made["migrated"] += 1
            elif self._script.replayable:
                schema = self._create_schema_locked(self._script)
                self.schemas_made["replayed"] += 1
            else:  # no pg_dump could read this server
                schema = self._create_schema_locked(None)
                migrate_for_real(self.admin_dsn, schema)
                self.schemas_made["migrated"] += 1
        return with_search_path(self.admin_dsn, schema)

    @property
    def replays_a_dump(self) -> bool:
        """Whether migrated schemas are replayed (false before the first, or without a
        pg_dump that can read the server)."""
        return self._script is not None and self._script.replayable

    def _create_schema_locked(self, script: MigratedSchemaScript | None) -> str:
        """CREATE SCHEMA (and fill it) on one kept admin connection: a connection per
        schema cost a SCRAM handshake each. A test may end every session of the database
        (end_sessions): then a new connection, and a new name, once."""
        for attempt in (1, 2):
            schema = f"t_{uuid.uuid4().hex[:16]}"
            fill = script.sql_for(schema) if script is not None else ""
            try:
                if self._schemas is None or self._schemas.closed:
                    self._schemas = psycopg.connect(
                        self.admin_dsn, autocommit=True, application_name=SCHEMA_MAKER
                    )
                self._schemas.execute(f'CREATE SCHEMA "{schema}";\n{fill}'.encode())
                return schema
            except psycopg.OperationalError:
                if self._schemas is not None:
                    self._schemas.close()
                self._schemas = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

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
        if named) but our own and the one making schemas; returns how many were ended."""
        name = conninfo_to_dict(dsn)["dbname"]
        query = (
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid() AND application_name <> %s"
            " AND (%s::text IS NULL OR application_name = %s)"
        )
        values = (name, SCHEMA_MAKER, application_name, application_name)
        with psycopg.connect(self.admin_dsn, autocommit=True) as connection:
            row = connection.execute(query, values).fetchone()
        return int(row[0]) if row else 0

    def stop(self) -> None:
        if self._schemas is not None:
            self._schemas.close()
        if self.embedded is not None:
            self.embedded.stop(mode="immediate")
            # Every test session made one; left behind, they filled /tmp by tens of MB a run.
            shutil.rmtree(self.embedded.root, ignore_errors=True)
