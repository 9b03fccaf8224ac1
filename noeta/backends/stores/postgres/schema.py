"""The PostgreSQL schema: checking it is current, and migrating it under an advisory lock."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from noeta.backends.stores import migrations
from noeta.backends.stores.postgres.connection import describe
from noeta.backends.stores.postgres.session import server_keepalives, with_keepalives
from noeta.backends.stores.postgres.store_errors import reason, store_error
from noeta.core.errors import ConfigError, StoreError, StoreUnavailable, StoreUnreachable

MIGRATION_LOCK = (
    "SELECT pg_advisory_xact_lock(hashtextextended('noeta.migrate:' || current_schema(), 0))"
)
# Settings for the rest of this transaction only (`set_config`'s is_local): through a
# pooler in transaction mode, nothing is left on a server session another client gets.
SET_FOR_THE_TRANSACTION = """
SELECT set_config(name, value, true)
  FROM unnest(%(names)s::text[], %(values)s::text[]) AS setting (name, value)
"""
CREATE_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS noeta_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""
APPLIED_MIGRATIONS = "SELECT version, name FROM noeta_migrations"
APPLIED_MIGRATIONS_IF_ANY = """
SELECT version, name FROM noeta_migrations WHERE to_regclass('noeta_migrations') IS NOT NULL
"""
# The server's own pid beside the check: a pooler answers the connection's startup with a
# cancel key of its own making, so a different pid means one is in between (ADR-0106).
MIGRATIONS_TABLE_EXISTS = "SELECT to_regclass('noeta_migrations') IS NOT NULL, pg_backend_pid()"
SESSION_ENV = "NOETA_STORE_SESSION"
# What libpq and the server say (in English) when nothing answered, or when the server
# cannot take a connection now, whoever asks: worth waiting for (ADR-0157).
_NOT_YET = (
    "Connection refused",  # nothing listens: stopped, or not started yet
    "Connection timed out",
    "timeout expired",  # connect_timeout
    "No route to host",
    "Network is unreachable",
    "Connection reset by peer",
    "server closed the connection unexpectedly",
    "could not translate host name",  # a name a cluster's DNS does not serve yet
    "the database system is starting up",  # 57P03
    "the database system is shutting down",  # 57P03
    "the database system is not yet accepting connections",  # 57P03
    "the database system is in recovery mode",
    "too many clients already",  # 53300
    "remaining connection slots are reserved",  # 53300
)
RECORD_MIGRATION = "INSERT INTO noeta_migrations (version, name) VALUES (%s, %s)"


@dataclass(frozen=True)
class SchemaChecked:
    """What checking the schema learned of the server: its version (e.g. 160004) and
    whether the connection went through a pooler rather than to PostgreSQL itself."""

    server_version: int
    through_pooler: bool


async def connect(dsn: str, **settings: Any) -> psycopg.AsyncConnection[Any]:
    """One connection outside the pool; a refusal becomes StoreUnavailable or ConfigError."""
    where = describe(dsn)
    try:
        return await psycopg.AsyncConnection.connect(dsn, **settings)
    except psycopg.OperationalError as error:
        if "unsupported startup parameter" in str(error):  # PgBouncer's refusal
            raise ConfigError(
                f"{where} is a connection pooler that refused a startup parameter "
                f"({reason(error)}): give PostgreSQL's own URL in {SESSION_ENV} "
                "(store_session: in noeta.yaml) beside the pooler's (docs/scaling.md)"
            ) from None
        unavailable = StoreUnreachable if _unreachable(error) else StoreUnavailable
        raise unavailable(f"cannot connect to PostgreSQL at {where}: {reason(error)}") from None
    except psycopg.ProgrammingError as error:
        raise ConfigError(f"invalid PostgreSQL URL ({where}): {reason(error)}") from None


def _unreachable(error: psycopg.OperationalError) -> bool:
    """Nothing answered, or the server cannot take a connection yet (starting up, shutting
    down, out of connections); not a server that answered and refused this client (a
    password, a database that does not exist), which waiting will not mend. libpq gives a
    failed connection no SQLSTATE, only its words: those not known here (another language,
    a new message) count as a refusal, as every failure did before ADR-0157."""
    said = str(error)
    return any(words in said for words in _NOT_YET)


async def check_schema(dsn: str, **settings: Any) -> SchemaChecked:
    """Raise `SchemaMismatch` unless the database has exactly this code's migrations."""
    async with await connect(dsn, **settings, autocommit=True) as connection:
        try:
            applied, backend_pid = await _applied_and_pid(connection)
        except psycopg.Error as error:
            raise store_error(error, describe(dsn), write=False, broken=connection.broken) from None
        version = connection.info.server_version
        pooled = backend_pid != connection.info.backend_pid
    migrations.require_current(migrations.load_migrations("postgres"), applied)
    return SchemaChecked(version, pooled)


async def migrate_database(dsn: str, **settings: Any) -> list[migrations.Migration]:
    """Apply every pending migration in one transaction under an advisory lock.

    Safe when several processes migrate at once: the second waits for the first, then
    finds nothing to do. Returns the migrations it applied.
    """
    known = migrations.load_migrations("postgres")
    dsn = with_keepalives(dsn)  # ADR-0129, for `noeta db migrate` too
    async with await connect(dsn, **settings) as connection:
        # While the migration holds its locks (DDL's among them, which stop every worker's
        # statements), the server probes the session as its client does: a path that
        # forgets a deploy's migration frees them in about 90 s, not the kernel's two
        # hours (ADR-0154). For the transaction only, and so on the URL given, even a
        # pooler's, which refuses startup options.
        keepalives = server_keepalives(dsn, connection.info.server_version)
        try:
            async with connection.transaction():
                if keepalives:
                    names, values = zip(*keepalives.items(), strict=True)
                    await connection.execute(
                        SET_FOR_THE_TRANSACTION, {"names": list(names), "values": list(values)}
                    )
                await connection.execute(MIGRATION_LOCK)
                await connection.execute(CREATE_MIGRATIONS_TABLE)
                applied = await _applied(connection)
                todo = migrations.pending(known, applied)
                for migration in todo:
                    await connection.execute(sql.SQL(migration.sql))
                    record = (migration.version, migration.name)
                    await connection.execute(RECORD_MIGRATION, record)
        except psycopg.errors.InsufficientPrivilege as error:
            raise StoreError(
                f"cannot migrate PostgreSQL at {describe(dsn)}: {reason(error)}; "
                "run `noeta db migrate` as the schema's owner"
            ) from None
        except psycopg.Error as error:
            raise store_error(error, describe(dsn), write=True, broken=connection.broken) from None
    return todo


async def _applied(connection: psycopg.AsyncConnection[Any]) -> dict[int, str]:
    return (await _applied_and_pid(connection))[0]


async def _applied_and_pid(
    connection: psycopg.AsyncConnection[Any],
) -> tuple[dict[int, str], int]:
    cursor = await connection.execute(MIGRATIONS_TABLE_EXISTS)
    row = await cursor.fetchone()
    assert row is not None
    if not row[0]:
        return {}, row[1]
    cursor = await connection.execute(APPLIED_MIGRATIONS)
    return {version: name for version, name in await cursor.fetchall()}, row[1]
