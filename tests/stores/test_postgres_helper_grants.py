"""Migration 0014 takes EXECUTE on the unfenced helpers from every role granted it before
(a worker role that ops/grants.sql set up on an older schema), without waiting for
grants.sql to run again."""

from __future__ import annotations

import uuid

import psycopg
from psycopg import sql

from noeta.backends.stores import migrations

HELPERS = (
    "noeta_insert_events(text, bigint, bigint, jsonb)",
    "noeta_take_model_budget(text[], bigint, timestamptz, integer)",
)


def test_the_migration_revokes_the_helpers_from_a_role_granted_them_before(
    empty_postgres_url: str,
) -> None:
    role = f"noeta_worker_{uuid.uuid4().hex[:10]}"
    known = migrations.load_migrations("postgres")
    before, after = known[:13], known[13:]
    assert [migration.version for migration in after][:1] == [14]
    with psycopg.connect(empty_postgres_url, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(role)))
        try:
            for migration in before:
                connection.execute(sql.SQL(migration.sql))  # type: ignore[arg-type]
            for helper in HELPERS:  # as ops/grants.sql did before 0014
                connection.execute(
                    sql.SQL("GRANT EXECUTE ON FUNCTION {} TO {}").format(
                        sql.SQL(helper), sql.Identifier(role)
                    )
                )
            for migration in after:
                connection.execute(sql.SQL(migration.sql))  # type: ignore[arg-type]
            for helper in HELPERS:
                row = connection.execute(
                    "SELECT has_function_privilege(%s, %s, 'EXECUTE')", (role, helper)
                ).fetchone()
                assert row == (False,), helper
        finally:
            connection.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            connection.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
