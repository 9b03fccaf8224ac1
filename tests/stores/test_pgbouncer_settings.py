"""The session URL beside a pooler's (ADR-0106): what it changes on the pooled path and
what it leaves alone on a direct one, and the settings it refuses, each naming itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from noeta.backends.stores import migrate_store, open_store
from noeta.backends.stores.postgres import PostgresStore
from noeta.core.errors import ConfigError
from noeta.core.ports.store import Store
from noeta.testing.pgbouncer import PgBouncer

NOETA = str(Path(sys.executable).parent / "noeta")
DEFAULT_PREPARE_THRESHOLD = 5  # psycopg's


async def prepare_threshold(store: Store) -> Any:
    assert isinstance(store, PostgresStore)
    async with store._pool.connection() as connection:
        return connection.prepare_threshold


async def test_a_direct_store_prepares_as_before_and_a_pooled_one_prepares_nothing(
    postgres_url: str, pgbouncer: PgBouncer, monkeypatch: pytest.MonkeyPatch
) -> None:
    direct = await open_store(postgres_url)
    try:
        assert await prepare_threshold(direct) == DEFAULT_PREPARE_THRESHOLD
    finally:
        await direct.close()
    monkeypatch.setenv("NOETA_STORE_SESSION", postgres_url)
    pooled = await open_store(pgbouncer.pooled(postgres_url))
    try:
        assert await prepare_threshold(pooled) is None
        for _ in range(DEFAULT_PREPARE_THRESHOLD + 2):  # past psycopg's threshold, shared
            assert await pooled.get_task("none") is None
    finally:
        await pooled.close()


async def test_a_pooler_without_a_session_url_is_refused_naming_the_setting(
    postgres_url: str, pgbouncer: PgBouncer
) -> None:
    pooled = pgbouncer.pooled(postgres_url)
    # PgBouncer's default: the startup options (noeta's limits) refused.
    with pytest.raises(ConfigError, match="NOETA_STORE_SESSION") as refused:
        await open_store(pooled)
    assert "connection pooler" in str(refused.value)
    # Told to drop them instead: the connection's pid is the pooler's, not PostgreSQL's.
    pgbouncer.ignore_startup_parameters("options")
    try:
        with pytest.raises(ConfigError, match="NOETA_STORE_SESSION") as refused:
            await open_store(pooled)
        assert "LISTEN" in str(refused.value)
    finally:
        pgbouncer.ignore_startup_parameters("")


@pytest.mark.parametrize(
    "session_url",
    ["sqlite:///noeta.db", "mysql://noeta:S3cret-pw@db/noeta", "http://db/noeta"],
)
async def test_a_session_url_that_is_not_postgres_is_refused_naming_the_setting(
    postgres_url: str, session_url: str
) -> None:
    with pytest.raises(ConfigError, match="NOETA_STORE_SESSION") as refused:
        await open_store(postgres_url, session_url=session_url)
    assert "S3cret-pw" not in str(refused.value)


async def test_a_session_url_beside_a_store_that_is_not_postgres_is_refused(
    tmp_path: Path, postgres_url: str
) -> None:
    with pytest.raises(ConfigError, match="NOETA_STORE_SESSION"):
        await open_store(f"sqlite:///{tmp_path / 'noeta.db'}", session_url=postgres_url)


def test_the_cli_says_so_in_one_line_without_the_password(tmp_path: Path) -> None:
    environment = {
        **os.environ,
        "NOETA_STORE": f"sqlite:///{tmp_path / 'noeta.db'}",
        "NOETA_STORE_SESSION": "mysql://noeta:S3cret-pw@db/noeta",
        "NOETA_HOME": str(tmp_path / "home"),
    }
    done = subprocess.run(
        [NOETA, "tasks"], check=False, env=environment, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "NOETA_STORE_SESSION" in lines[0], done.stderr
    assert "S3cret-pw" not in done.stderr and "Traceback" not in done.stderr


async def test_migrating_beside_a_pooler_migrates_on_the_session_url(
    empty_postgres_url: str, pgbouncer: PgBouncer, monkeypatch: pytest.MonkeyPatch
) -> None:
    pooled = pgbouncer.pooled(empty_postgres_url)
    monkeypatch.setenv("NOETA_STORE", pooled)
    monkeypatch.setenv("NOETA_STORE_SESSION", empty_postgres_url)
    applied = await migrate_store(None)  # `noeta db migrate`
    assert applied
    store = await open_store(pooled)  # finds the schema current, through the pooler
    await store.close()
