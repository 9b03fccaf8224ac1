"""Opening a store from its URL: `postgresql://…` (or libpq `key=value`), `sqlite:///path`,
or none for the embedded default.

With no URL (no `--store`, no `NOETA_STORE`) noeta starts, or joins, a private PostgreSQL
server whose data lives in `$NOETA_HOME` (default: the per-user data directory), so
commands run from different shells share it. It is migrated automatically; a server
named by URL is migrated only by `noeta db migrate`.
"""

from __future__ import annotations

import os
from typing import Literal
from urllib.parse import urlsplit

from noeta.backends.stores.migrations import Migration
from noeta.backends.stores.urls import check_postgres_url
from noeta.core.errors import ConfigError
from noeta.core.store import Store

STORE_ENV = "NOETA_STORE"
_POSTGRES_SCHEMES = ("postgresql", "postgres")


def resolve_url(url: str | None) -> str | None:
    """The store URL to use: the given one, else $NOETA_STORE, else None (embedded)."""
    return url or os.environ.get(STORE_ENV) or None


async def open_store(
    url: str | None,
    *,
    application_name: str = "noeta",
    migrate: bool = False,
    max_connections: int = 10,
) -> Store:
    """Open the store at `url` (see the module docstring); raises ConfigError on a bad URL."""
    url = resolve_url(url)
    if url is None:
        url, migrate = _embedded_dsn(), True
    if store_kind(url) == "sqlite":
        from noeta.backends.stores.sqlite import SqliteStore

        return await SqliteStore.open(sqlite_path(url), migrate=True)
    from noeta.backends.stores.postgres import PostgresStore

    return await PostgresStore.open(
        url, application_name=application_name, migrate=migrate, max_connections=max_connections
    )


async def migrate_store(url: str | None) -> list[Migration]:
    """Apply the store's pending migrations; returns those applied."""
    url = resolve_url(url) or _embedded_dsn()
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


def _embedded_dsn() -> str:
    from noeta.backends.stores.embedded import EmbeddedPostgres
    from noeta.backends.stores.embedded_home import default_home

    return EmbeddedPostgres(default_home()).start()


def _is_libpq_conninfo(text: str) -> bool:
    """`host=… dbname=…`, the other form libpq and psql accept."""
    return "://" not in text and "=" in text


def sqlite_path(url: str) -> str:
    """The file of a `sqlite:///relative` or `sqlite:////absolute` URL."""
    path = url[len("sqlite://") :]
    if not path.startswith("/") or path == "/":
        raise ConfigError("a sqlite store URL looks like sqlite:///PATH (e.g. sqlite:///noeta.db)")
    return path[1:]
