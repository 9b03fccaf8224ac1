"""A stable text rendering of a migrated schema, compared with `queue/schema/<dialect>.txt`,
and the definition of each function, trigger and view, compared with its own file under
`queue/<dialect>/{functions,triggers,views}/` (ADR-0081).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable
from typing import Any

import psycopg

POSTGRES_COLUMNS = """
SELECT table_name, column_name, data_type, is_nullable, coalesce(column_default, '')
  FROM information_schema.columns WHERE table_schema = current_schema()
 ORDER BY table_name, ordinal_position
"""
POSTGRES_CONSTRAINTS = """
SELECT c.conrelid::regclass::text, c.conname, pg_get_constraintdef(c.oid)
  FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
 WHERE n.nspname = current_schema()
   AND c.contype <> 'n'  -- PostgreSQL 18 lists NOT NULL here too; columns already say it
 ORDER BY 1, 2
"""
POSTGRES_INDEXES = """
SELECT tablename, indexname, indexdef FROM pg_indexes
 WHERE schemaname = current_schema() ORDER BY 1, 2
"""
POSTGRES_FUNCTIONS = """
SELECT p.proname, pg_get_function_identity_arguments(p.oid)
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = current_schema() ORDER BY 1, 2
"""
# Bodies are not in the snapshot: each object's whole definition is compared with its file.
POSTGRES_DEFINITIONS = """
SELECT 'functions', p.proname, pg_get_functiondef(p.oid)
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = current_schema()
UNION ALL
SELECT 'triggers', t.tgname, pg_get_triggerdef(t.oid, true)
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = current_schema() AND NOT t.tgisinternal
UNION ALL
SELECT 'views', c.relname,
       format(E'CREATE OR REPLACE VIEW %I AS\n%s', c.relname, pg_get_viewdef(c.oid, true))
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = current_schema() AND c.relkind = 'v'
 ORDER BY 1, 2, 3
"""
SQLITE_OBJECTS = """
SELECT type, name, sql FROM sqlite_master
 WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' ORDER BY type, name
"""
SQLITE_DEFINITIONS = """
SELECT type || 's', name, sql FROM sqlite_master WHERE type IN ('trigger', 'view') ORDER BY 1, 2
"""


def describe_postgres(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as connection:
        schema = connection.execute("SELECT current_schema()").fetchone()
        assert schema is not None
        lines = []
        for title, query in [
            ("column", POSTGRES_COLUMNS),
            ("constraint", POSTGRES_CONSTRAINTS),
            ("index", POSTGRES_INDEXES),
            ("function", POSTGRES_FUNCTIONS),
        ]:
            for row in connection.execute(query):
                lines.append(_line(title, row, schema[0]))
    return "\n".join(lines) + "\n"


def postgres_definitions(dsn: str) -> dict[str, str]:
    """`functions/<name>.sql` (every overload), `triggers/…`, `views/…`: what the database
    holds, as re-runnable SQL without the schema's name."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        schema = connection.execute("SELECT current_schema()").fetchone()
        assert schema is not None
        rows = connection.execute(POSTGRES_DEFINITIONS).fetchall()
    qualified = re.compile(rf'"?{re.escape(schema[0])}"?\.')
    return _by_file((kind, name, qualified.sub("", ddl)) for kind, name, ddl in rows)


def sqlite_definitions(path: str) -> dict[str, str]:
    """`triggers/<name>.sql` and `views/<name>.sql`: the statements as sqlite keeps them."""
    connection = sqlite3.connect(path)
    try:
        rows = connection.execute(SQLITE_DEFINITIONS).fetchall()
    finally:
        connection.close()
    return _by_file(rows)


def _by_file(rows: Iterable[tuple[str, str, str]]) -> dict[str, str]:
    files: dict[str, list[str]] = {}
    for kind, name, ddl in rows:
        files.setdefault(f"{kind}/{name}.sql", []).append(ddl.rstrip() + ";\n")
    return {path: "\n".join(statements) for path, statements in files.items()}


def describe_sqlite(path: str) -> str:
    connection = sqlite3.connect(path)
    try:
        rows = connection.execute(SQLITE_OBJECTS).fetchall()
    finally:
        connection.close()
    return "\n".join(_line(row[0], (row[1], _without_comments(row[2])), "") for row in rows) + "\n"


def _without_comments(ddl: str) -> str:
    return " ".join(re.sub(r"--[^\n]*", "", ddl).split())


def _line(title: str, row: tuple[Any, ...], schema: str) -> str:
    text = " | ".join(str(value) for value in row)
    if schema:  # per-test schemas get random names; the snapshot must not
        text = re.sub(rf'"?{re.escape(schema)}"?\.', "", text)
    return f"{title}: {text}"
