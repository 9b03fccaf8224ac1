"""Session-wide fixtures: one real PostgreSQL server for the whole run."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from noeta.backends.stores.embedded import make_home
from noeta.testing.fault_proxy import FaultProxy
from noeta.testing.pgbouncer import PgBouncer, pgbouncer_binary
from noeta.testing.postgres import TestPostgres


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[TestPostgres]:
    server = TestPostgres()
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server: TestPostgres) -> str:
    """A DSN whose search_path is a fresh schema, migrated: what every migration makes,
    replayed from the session's one real migration (noeta/testing/migrated_schema.py)."""
    return postgres_server.new_migrated_schema()


@pytest.fixture
def empty_postgres_url(postgres_server: TestPostgres) -> str:
    """A DSN whose search_path is a fresh schema with nothing in it: for the tests of
    migrating itself (`noeta db migrate`, upgrades, a schema at an older version)."""
    return postgres_server.new_schema()


@pytest.fixture
def database_url(postgres_server: TestPostgres) -> Iterator[str]:
    """A DSN of a fresh, empty database of its own (for database-wide settings)."""
    url = postgres_server.new_database()
    yield url
    postgres_server.drop_database(url)


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A fresh store of each kind, the PostgreSQL one migrated: the same behaviour is owed
    on both."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('store') / 'noeta.db'}"
    server: TestPostgres = request.getfixturevalue("postgres_server")
    return server.new_migrated_schema()


@pytest.fixture(scope="session")
def pgbouncer(postgres_server: TestPostgres) -> Iterator[PgBouncer]:
    """A real PgBouncer in transaction mode in front of the test server (ADR-0106), two
    server sessions per schema. Skipped without one, except under CI, where it fails
    (`make pgbouncer` installs it)."""
    binary = pgbouncer_binary()
    if binary is None:
        why = "no pgbouncer on this machine (`make pgbouncer` installs it)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    folder = make_home("noeta-test-pgbouncer-")  # reachable by the server's user, as root
    bouncer = PgBouncer(binary, postgres_server.admin_dsn, folder)
    bouncer.start()
    yield bouncer
    bouncer.remove()


# PgBouncer's wait for a server for a client that has none: short, so that the first
# statement after the server went away is refused within the store's deadline (10 s).
QUERY_WAIT_SECONDS = 2
# Long enough that every later statement of the test meets the refusal PgBouncer caches
# after its failed login, never a new login attempt.
LOGIN_RETRY_SECONDS = 600


@pytest.fixture
def pgbouncer_server_path(postgres_server: TestPostgres) -> Iterator[FaultProxy]:
    """The path from a PgBouncer to PostgreSQL (`pgbouncer_on_a_path`'s), which a test can
    take away (`stop()`): that PgBouncer's server sessions end and its logins fail."""
    parts = conninfo_to_dict(postgres_server.admin_dsn)
    proxy = FaultProxy(str(parts.get("host") or "127.0.0.1"), int(parts.get("port") or 5432))
    proxy.start()
    yield proxy
    proxy.stop()


@pytest.fixture
def pgbouncers_on_the_path(
    postgres_server: TestPostgres, pgbouncer_server_path: FaultProxy
) -> Iterator[Callable[[int], PgBouncer]]:
    """Start a PgBouncer behind `pgbouncer_server_path` with this `server_login_retry`."""
    binary = pgbouncer_binary()
    if binary is None:
        pytest.skip("no pgbouncer on this machine (`make pgbouncer` installs it)")
    behind_the_path = make_conninfo(
        postgres_server.admin_dsn, host="127.0.0.1", port=str(pgbouncer_server_path.port)
    )
    started: list[PgBouncer] = []

    def start(login_retry_seconds: int) -> PgBouncer:
        bouncer = PgBouncer(
            binary,
            behind_the_path,
            make_home("noeta-test-pgbouncer-"),
            login_retry_seconds=login_retry_seconds,
            query_wait_seconds=QUERY_WAIT_SECONDS,
        )
        started.append(bouncer)
        bouncer.start()
        return bouncer

    yield start
    for bouncer in started:
        bouncer.remove()


@pytest.fixture
def pgbouncer_on_a_path(pgbouncers_on_the_path: Callable[[int], PgBouncer]) -> PgBouncer:
    """A PgBouncer behind `pgbouncer_server_path` that, once its login failed, refuses
    every statement for the rest of the test."""
    return pgbouncers_on_the_path(LOGIN_RETRY_SECONDS)
