"""The sqlite schema: applying the migrations in one write transaction, or checking the
file is current."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

from noeta.backends.stores.migrations import Migration, load_migrations, pending, require_current
from noeta.backends.stores.sqlite.connection import SqliteConnection
from noeta.backends.stores.sqlite.encoding import now_micros

CREATE_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS noeta_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at INTEGER NOT NULL
)"""
SELECT_APPLIED_MIGRATIONS = "SELECT version, name FROM noeta_migrations"
FIND_MIGRATIONS_TABLE = (
    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'noeta_migrations'"
)
RECORD_MIGRATION = "INSERT INTO noeta_migrations (version, name, applied_at) VALUES (?, ?, ?)"


class SqliteSchema(SqliteConnection):
    """Migrating the file and checking its migrations."""

    async def migrate(self) -> list[Migration]:
        """Apply the pending migrations in one transaction; return those applied."""
        return await self._run(self._migrate)

    def _migrate(self) -> list[Migration]:
        known = load_migrations("sqlite")
        # One transaction, write lock first: a second process migrating at the same time
        # waits, then finds nothing pending.
        with self._transaction() as connection:
            connection.execute(CREATE_MIGRATIONS_TABLE)
            applied = dict(connection.execute(SELECT_APPLIED_MIGRATIONS).fetchall())
            todo = pending(known, applied)
            for migration in todo:
                for statement in _statements(migration.sql):
                    connection.execute(statement)
                connection.execute(
                    RECORD_MIGRATION, (migration.version, migration.name, now_micros())
                )
        return todo

    def _check_schema(self) -> None:
        applied: dict[int, str] = {}
        if self._connection.execute(FIND_MIGRATIONS_TABLE).fetchone() is not None:
            applied = dict(self._connection.execute(SELECT_APPLIED_MIGRATIONS).fetchall())
        require_current(load_migrations("sqlite"), applied)


def _statements(script: str) -> Iterator[str]:
    """Split a migration into statements: `executescript` would COMMIT our transaction.

    A comment-only script yields only an empty statement, which sqlite runs as a no-op.
    """
    statement = ""
    for piece in script.split(";"):
        statement += piece + ";"
        # A ';' inside a comment or a string does not complete a statement.
        if sqlite3.complete_statement(statement):
            yield statement
            statement = ""
