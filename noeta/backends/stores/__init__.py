"""Opening a store from its URL: `postgresql://…` (or libpq `key=value`), `sqlite:///path`,
or none for the embedded default.

With no URL (no `--store`, no `NOETA_STORE`) noeta starts, or joins, a private PostgreSQL
server whose data lives in `$NOETA_HOME` (default: the per-user data directory), so
commands run from different shells share it; one that starts it says so on stderr, and
one that only reads (`start_embedded=False`) joins a running one or fails, creating
nothing. It is migrated automatically; a server named by URL is migrated only by
`noeta db migrate`.

Behind a pooler in transaction mode (PgBouncer), `NOETA_STORE_SESSION` (or `store_session:`
in noeta.yaml) names a direct PostgreSQL URL for what needs a session of its own (ADR-0106).
"""

from __future__ import annotations

import os
from typing import Literal
from urllib.parse import urlsplit

from noeta.backends.stores.migrations import Migration
from noeta.backends.stores.urls import check_postgres_url
from noeta.core.errors import ConfigError, StoreUnavailable
from noeta.core.ports.store import Store

STORE_ENV = "NOETA_STORE"
SESSION_ENV = "NOETA_STORE_SESSION"
_POSTGRES_SCHEMES = ("postgresql", "postgres")


def resolve_url(url: str | None) -> str | None:
    """The store URL to use: the given one, else $NOETA_STORE, else None (embedded)."""
    return url or os.environ.get(STORE_ENV) or None


def resolve_session_url(session_url: str | None) -> str | None:
    """The direct URL for session work (LISTEN, session locks, migrating): the given one,
    else $NOETA_STORE_SESSION, else None (the store URL itself, as before ADR-0106)."""
    return session_url or os.environ.get(SESSION_ENV) or None


def configured_session_url(config_value: str | None) -> str | None:
    """$NOETA_STORE_SESSION, else noeta.yaml's `store_session:` (the environment wins, as
    NOETA_STORE does over a deployment's file)."""
    return os.environ.get(SESSION_ENV) or config_value


async def open_store(
    url: str | None,
    *,
    session_url: str | None = None,
    application_name: str = "noeta",
    migrate: bool = False,
    max_connections: int = 10,
    min_connections: int = 1,
    start_embedded: bool = True,
    for_worker: bool = False,
) -> Store:
    """Open the store at `url` (see the module docstring); raises ConfigError on a bad URL.
    `start_embedded=False`: with no URL, StoreUnavailable unless the embedded server runs.
    On PostgreSQL the pool has `min_connections` open before this returns. `session_url`
    (else $NOETA_STORE_SESSION): `url` is a pooler's, this one PostgreSQL's own.
    `for_worker`: a worker's pools, its group commit's rounds and renewals apart (ADR-0139)."""
    url = resolve_url(url)
    session_url = resolve_session_url(session_url)
    if session_url is not None:
        _check_session_url(session_url, url)
    if url is None:
        url, migrate = _embedded_dsn(start=start_embedded), True
    if store_kind(url) == "sqlite":
        from noeta.backends.stores.sqlite import SqliteStore

        return await SqliteStore.open(sqlite_path(url), migrate=True)
    from noeta.backends.stores.postgres import PostgresStore

    return await PostgresStore.open(
        url,
        session_dsn=session_url,
        application_name=application_name,
        migrate=migrate,
        max_connections=max_connections,
        min_connections=min_connections,
        for_worker=for_worker,
    )


def _check_session_url(session_url: str, url: str | None) -> None:
    """ConfigError unless the session URL is PostgreSQL's and goes with a PostgreSQL store."""
    from noeta.backends.stores.urls import masked

    try:
        kind = store_kind(session_url)
    except ConfigError:
        kind = None
    if kind != "postgres":
        raise ConfigError(
            f"{SESSION_ENV} (store_session:) {masked(session_url)!r} is not a PostgreSQL URL: "
            "it names PostgreSQL itself, not a pooler, for LISTEN and session locks "
            "(postgresql://USER:PASSWORD@HOST:PORT/DATABASE)"
        )
    if url is None or store_kind(url) != "postgres":
        raise ConfigError(
            f"{SESSION_ENV} (store_session:) is set, but the store is not a PostgreSQL URL: "
            f"set {STORE_ENV} to the pooler's postgresql:// URL, or unset {SESSION_ENV}"
        )


async def migrate_store(url: str | None) -> list[Migration]:
    """Apply the store's pending migrations; returns those applied. DDL under an advisory
    lock goes to $NOETA_STORE_SESSION when it goes with the store's URL (ADR-0106)."""
    url = resolve_url(url)
    session_url = resolve_session_url(None)
    if session_url is not None and url == os.environ.get(STORE_ENV):
        _check_session_url(session_url, url)
        url = session_url
    url = url or _embedded_dsn()
    if store_kind(url) == "sqlite":
        from noeta.backends.stores.sqlite import SqliteStore

        store = await SqliteStore.open(sqlite_path(url), migrate=False, check_schema=False)
        try:
            return await store.migrate()
        finally:
            await store.close()
    from noeta.backends.stores.postgres import migrate_database

    return await migrate_database(url, application_name="noeta-migrate", connect_timeout=10)


def store_kind(url: str) -> Literal["postgres", "sqlite"]:
    """Which backend a URL names; raises ConfigError for anything else."""
    scheme = url.partition("://")[0].lower() if "://" in url else urlsplit(url).scheme
    if scheme in _POSTGRES_SCHEMES or _is_libpq_conninfo(url):
        check_postgres_url(url)
        return "postgres"
    if scheme == "sqlite":
        sqlite_path(url)
        return "sqlite"
    shown = scheme or url.split(":", 1)[0]
    raise ConfigError(
        f"unknown store URL scheme {shown!r}: use postgresql://…, sqlite:///PATH, "
        "or no URL for the embedded PostgreSQL"
    )


def _embedded_dsn(*, start: bool = True) -> str:
    import sys

    from noeta.backends.stores.embedded import EmbeddedPostgres
    from noeta.backends.stores.embedded_home import default_home

    server = EmbeddedPostgres(default_home())
    if not start:
        running = server.running_dsn()
        if running is None:
            raise StoreUnavailable(
                f"the embedded PostgreSQL in {server.root} is not running, and a command "
                "that only reads starts none: `noeta db start` starts it (so does any "
                "command that writes, e.g. `noeta submit`), or give --store"
            )
        return running
    dsn = server.start()
    if server.started_here:  # a server left running after this process: say so, once
        print(
            f"noeta: started the embedded PostgreSQL in {server.root} "
            "(it keeps running; `noeta db stop` stops it)",
            file=sys.stderr,
        )
    return dsn


def _is_libpq_conninfo(text: str) -> bool:
    """`host=… dbname=…`, the other form libpq and psql accept."""
    return "://" not in text and "=" in text


def sqlite_path(url: str) -> str:
    """The file of a `sqlite:///relative` or `sqlite:////absolute` URL."""
    path = url[len("sqlite://") :]
    if not path.startswith("/") or path == "/":
        raise ConfigError("a sqlite store URL looks like sqlite:///PATH (e.g. sqlite:///noeta.db)")
    return path[1:]
