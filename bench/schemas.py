"""What a test's migrated schema costs: a real migration (as `postgres_url` gave before)
against the replay of the session's captured dump (`TestPostgres.new_migrated_schema`).

On the test suite's own server (embedded, TEST_SETTINGS: fsync off), interleaved rounds of:
  migrate   connect, CREATE SCHEMA, then `migrate_database` (what a test paid before)
  ddl only  the 26 migrations' SQL as one query on a kept connection: the server's share
  replay    `new_migrated_schema()`: CREATE SCHEMA and the dump, one round trip
"client CPU" is this process's CPU time per schema (Python and psycopg); the rest of a
migration's time is the server's work and the waits of its ~58 round trips.

Run:  .venv/bin/python bench/schemas.py [--quick] [--dsn DSN]
Measured, not asserted; it always exits 0.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).parent))
from common import parser

from noeta.backends.stores import migrations
from noeta.backends.stores.postgres import migrate_database
from noeta.testing.postgres import TestPostgres, with_search_path


def migrate(server: TestPostgres) -> None:
    schema = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(server.admin_dsn, autocommit=True) as connection:
        connection.execute(f'CREATE SCHEMA "{schema}"')
    asyncio.run(migrate_database(with_search_path(server.admin_dsn, schema)))


def ddl_only(server: TestPostgres, connection: psycopg.Connection[tuple[object, ...]]) -> None:
    schema = f"t_{uuid.uuid4().hex[:16]}"
    script = "\n;\n".join(migration.sql for migration in migrations.load_migrations("postgres"))
    connection.execute(
        f'CREATE SCHEMA "{schema}"; SET search_path = "{schema}";\n{script}'.encode()
    )


def timed(run: Callable[[], None]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    arguments = parser(__doc__).parse_args()
    rounds = 5 if arguments.quick else 40
    if arguments.dsn:
        import os

        os.environ["NOETA_TEST_POSTGRES_DSN"] = arguments.dsn
    server = TestPostgres()
    try:
        server.new_migrated_schema()  # the session's first: a real migration, then pg_dump
        results: dict[str, list[tuple[float, float]]] = {
            "migrate": [],
            "ddl only": [],
            "replay": [],
        }
        with psycopg.connect(server.admin_dsn, autocommit=True) as connection:
            for _ in range(rounds):
                results["migrate"].append(timed(lambda: migrate(server)))
                results["ddl only"].append(timed(lambda: ddl_only(server, connection)))
                results["replay"].append(timed(server.new_migrated_schema))
        print(f"{rounds} schemas each; milliseconds per schema")
        print(f"{'':10} {'median':>8} {'min':>8} {'client CPU':>11}")
        for name, samples in results.items():
            walls = [wall * 1000 for wall, _ in samples]
            cpus = [cpu * 1000 for _, cpu in samples]
            print(
                f"{name:10} {statistics.median(walls):8.1f} {min(walls):8.1f}"
                f" {statistics.median(cpus):11.1f}"
            )
        print("schemas made:", server.schemas_made)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
