"""The embedded server is started with a minimal environment, never the starting
process's: a provider key in a worker's environment is not in the postmaster's nor in a
backend's (both dumpable processes a confined-off command could read)."""

from __future__ import annotations

import shutil
from pathlib import Path

import psycopg
import pytest

from noeta.backends.stores.embedded import EmbeddedPostgres, make_home
from noeta.testing.postgres import TEST_SETTINGS

FAKE_KEY = "sk-ant-test-0123456789abcdef"


def environment_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = [item.partition(b"=") for item in raw.split(b"\0") if item]
    return {name.decode(): value.decode(errors="replace") for name, _, value in pairs}


def test_the_embedded_server_holds_none_of_the_starting_processs_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    monkeypatch.setenv("NOETA_SOMETHING_PRIVATE", "private-value")
    parent = make_home("noeta-environment-")
    server = EmbeddedPostgres(parent / "home", settings=TEST_SETTINGS)
    try:
        dsn = server.start()
        postmaster = int((server.pgdata / "postmaster.pid").read_text().splitlines()[0])
        with psycopg.connect(dsn) as connection:  # open: its backend lives while we read
            row = connection.execute("SELECT pg_backend_pid(), 6 * 7").fetchone()
            assert row is not None and row[1] == 42  # the server works
            environments = {pid: environment_of(pid) for pid in (postmaster, row[0])}
        # A backend's may read empty: PostgreSQL writes its process title over that area.
        assert environments[postmaster], "the postmaster's environment is readable"
        for environment in environments.values():
            assert "ANTHROPIC_API_KEY" not in environment
            assert "NOETA_SOMETHING_PRIVATE" not in environment
            assert not any(FAKE_KEY in value for value in environment.values())
            assert set(environment) <= {"PATH", "LANG", "LC_ALL", "TZ", "TMPDIR", "PGDATA",
                                        "PG_GRANDPARENT_PID", "PGLOCALEDIR", "PGSYSCONFDIR",
                                        "LC_COLLATE", "LC_CTYPE", "LC_MESSAGES", "LC_MONETARY",
                                        "LC_NUMERIC", "LC_TIME", "PG_OOM_ADJUST_FILE",
                                        "PG_OOM_ADJUST_VALUE", "PWD"}, environment  # fmt: skip
    finally:
        server.stop(mode="immediate")
        shutil.rmtree(parent)
