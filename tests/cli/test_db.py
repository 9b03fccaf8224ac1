"""`noeta db migrate` as a user runs it: the real command in a child process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from noeta.backends.stores.embedded import EmbeddedPostgres
from noeta.backends.stores.migrations import load_migrations


def noeta(*arguments: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "NOETA_STORE"}
    return subprocess.run(
        [sys.executable, "-m", "noeta", *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        env={**environment, **(env or {})},
        check=False,
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("noeta: error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_migrate_applies_then_reports_up_to_date(postgres_url: str) -> None:
    first = noeta("db", "migrate", "--store", postgres_url)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[0] == "applied 0001_create_tasks"
    second = noeta("db", "migrate", "--store", postgres_url)
    assert second.stdout.strip() == "the schema is up to date"


def test_the_store_url_can_come_from_the_environment(tmp_path: Path) -> None:
    result = noeta("db", "migrate", env={"NOETA_STORE": f"sqlite:///{tmp_path / 'n.db'}"})
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "n.db").exists()


@pytest.mark.parametrize("url", ["mysql://localhost/db", "redis://x", "nonsense"])
def test_an_unknown_scheme_is_one_line(url: str) -> None:
    assert_one_line_error(noeta("db", "migrate", "--store", url), "unknown store URL scheme")


def test_an_unreachable_database_is_one_line_without_the_password() -> None:
    result = noeta("db", "migrate", "--store", "postgresql://u:hunter2@127.0.0.1:9/db")
    assert_one_line_error(result, "127.0.0.1:9/db")
    assert "hunter2" not in result.stderr + result.stdout


def test_a_wrong_password_is_one_line_without_either_password(postgres_url: str) -> None:
    real = conninfo_to_dict(postgres_url).get("password")
    if not real:
        pytest.skip("the test server accepts any password (trust authentication)")
    result = noeta("db", "migrate", "--store", make_conninfo(postgres_url, password="nope-123"))
    assert_one_line_error(result, "password authentication failed")
    assert "nope-123" not in result.stderr and str(real) not in result.stderr


def test_a_newer_schema_is_refused_and_left_alone(postgres_url: str) -> None:
    assert noeta("db", "migrate", "--store", postgres_url).returncode == 0
    with psycopg.connect(postgres_url) as connection:
        connection.execute("INSERT INTO noeta_migrations (version, name) VALUES (99, 'future')")
    result = noeta("db", "migrate", "--store", postgres_url)
    assert_one_line_error(result, "version 99", "upgrade noeta")
    with psycopg.connect(postgres_url) as connection:
        rows = connection.execute("SELECT count(*) FROM noeta_migrations").fetchone()
    assert rows == (len(load_migrations("postgres")) + 1,)  # ours and the future one


@pytest.fixture
def noeta_home(tmp_path: Path) -> Iterator[Path]:
    home = tmp_path / "home"
    yield home
    EmbeddedPostgres(home).stop(mode="immediate")


@pytest.mark.slow
def test_the_embedded_default_is_shared_by_separate_processes(noeta_home: Path) -> None:
    env = {"NOETA_HOME": str(noeta_home)}
    first = noeta("db", "migrate", env=env)
    assert first.returncode == 0, first.stderr
    # The embedded store migrates itself on first use; a second process joins the same
    # running server and finds it current.
    second = noeta("db", "migrate", env=env)
    assert second.stdout.strip() == "the schema is up to date", second.stderr
    assert (noeta_home / "password").stat().st_mode & 0o077 == 0
