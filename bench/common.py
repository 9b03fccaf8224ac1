"""What the benchmarks share: the server they measure on, and a fresh schema on it."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import psycopg

from noeta.backends.stores.embedded import EmbeddedPostgres, make_home
from noeta.backends.stores.postgres import migrate_database
from noeta.testing.postgres import TEST_DSN_ENV, with_search_path

__all__ = ["TEST_DSN_ENV", "counted_server", "cpu_seconds", "fresh_schema", "parser", "server"]


def parser(doc: str | None, *, quick: bool = True) -> argparse.ArgumentParser:
    """The options every benchmark takes: --dsn and (unless told not to) --quick."""
    made = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    made.add_argument("--dsn", help=f"PostgreSQL URL (default: ${TEST_DSN_ENV}, else embedded)")
    if quick:
        made.add_argument("--quick", action="store_true", help="a smoke run: fewer of everything")
    return made


@contextlib.contextmanager
def server(dsn: str | None) -> Iterator[str]:
    """`dsn`, else $NOETA_TEST_POSTGRES_DSN, else a private embedded PostgreSQL (fsync on)
    in a temporary directory, stopped and removed afterwards."""
    dsn = dsn or os.environ.get(TEST_DSN_ENV)
    if dsn:
        yield dsn
        return
    embedded = EmbeddedPostgres(make_home("noeta-bench-pg-"))
    print("starting an embedded PostgreSQL (fsync on)...", flush=True)
    try:
        yield embedded.start()
    finally:
        embedded.stop()
        shutil.rmtree(embedded.root, ignore_errors=True)


@contextlib.contextmanager
def counted_server(settings: Mapping[str, str] | None = None) -> Iterator[str]:
    """A private embedded PostgreSQL (fsync on) that counts statements: pg_stat_statements
    loaded and created, with `settings` beside it; stopped and removed afterwards."""
    preload = {"shared_preload_libraries": "pg_stat_statements", **(settings or {})}
    embedded = EmbeddedPostgres(make_home("noeta-bench-pg-"), settings=preload)
    try:
        dsn = embedded.start()
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        yield dsn
    finally:
        embedded.stop()
        shutil.rmtree(embedded.root, ignore_errors=True)


@contextlib.asynccontextmanager
async def fresh_schema(dsn: str) -> AsyncIterator[tuple[str, psycopg.AsyncConnection[Any]]]:
    """A migrated schema of its own on the server at `dsn`: its URL, and an admin
    connection whose search_path is that schema. Prints the server and the machine's
    load first; the schema is dropped afterwards, whatever happens."""
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as admin:
        cursor = await admin.execute("SELECT version(), current_setting('fsync')")
        version, fsync = (await cursor.fetchone()) or ("?", "?")
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"{version.split(' on ')[0]}; fsync {fsync}; {os.cpu_count()} CPUs; load {load}")
        await admin.execute(f'CREATE SCHEMA "{schema}"')
        try:
            url = with_search_path(dsn, schema)
            await migrate_database(url)
            await admin.execute(f'SET search_path = "{schema}"')
            yield url, admin
        finally:
            await admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


def cpu_seconds(pids: Iterable[int]) -> float:
    """Seconds of CPU these processes have used (Linux, a local server: /proc/PID/schedstat;
    nothing for one that cannot be read)."""
    total = 0
    for pid in pids:
        try:
            total += int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # ended meanwhile, or not on this machine
    return total / 1e9
