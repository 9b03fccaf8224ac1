"""A stable text rendering of a migrated schema, compared with `queue/schema/<dialect>.txt`.

The test that the migrations build exactly the committed snapshot catches a migration
edited after release, or a schema change made without a migration.
"""

from __future__ import annotations

import re
import sqlite3
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
SELECT p.proname, pg_get_function_identity_arguments(p.oid), md5(p.prosrc)
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = current_schema() ORDER BY 1, 2
"""
SQLITE_OBJECTS = """
SELECT type, name, sql FROM sqlite_master
 WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' ORDER BY type, name
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
