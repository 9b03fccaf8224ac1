"""`noeta db migrate` as a user runs it: the real command in a child process."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from noeta.backends.stores.embedded import EmbeddedPostgres, make_home
from noeta.backends.stores.embedded_home import default_home
from noeta.backends.stores.migrations import load_migrations
from noeta.testing.command_line import store_in_environment


def noeta(*arguments: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "NOETA_STORE"}
    given, environment = store_in_environment(arguments, {**environment, **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "noeta", *given],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
        check=False,
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("noeta: error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_migrate_applies_then_reports_up_to_date(empty_postgres_url: str) -> None:
    first = noeta("db", "migrate", "--store", empty_postgres_url)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[0] == "applied 0001_create_tasks"
    second = noeta("db", "migrate", "--store", empty_postgres_url)
    assert second.returncode == 0, second.stderr  # once seen empty at load 17: say why
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
def noeta_home() -> Iterator[Path]:
    # Not under tmp_path: pytest makes /tmp/pytest-of-<user> 0700, which the server's
    # own user cannot enter when the tests run as root (and noeta does not open it up).
    parent = make_home("noeta-cli-db-")
    home = parent / "home"
    yield home
    EmbeddedPostgres(home).stop(mode="immediate")
    shutil.rmtree(parent, ignore_errors=True)


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


@pytest.mark.slow
def test_db_status_start_and_stop_manage_the_embedded_server(noeta_home: Path) -> None:
    env = {"NOETA_HOME": str(noeta_home)}
    before = noeta("db", "status", env=env)
    assert before.returncode == 0, before.stderr
    assert "server:     not created yet" in before.stdout
    started = noeta("db", "start", env=env)
    assert started.returncode == 0, started.stderr
    port = EmbeddedPostgres(noeta_home).status().port
    assert started.stdout.strip() == f"running on 127.0.0.1:{port} in {noeta_home}"
    running = json.loads(noeta("db", "status", "--json", env=env).stdout)
    assert running["running"] and running["port"] == port and running["home"] == str(noeta_home)
    assert running["postgresql"].isdigit() and running["size_bytes"] > 1_000_000
    stopped = noeta("db", "stop", env=env)
    assert stopped.stdout.strip() == f"stopped ({noeta_home})", stopped.stderr
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(f"host=127.0.0.1 port={port} dbname=noeta user=noeta connect_timeout=5")
    assert "server:     not running" in noeta("db", "status", env=env).stdout
    assert noeta("db", "stop", env=env).stdout.strip() == f"not running ({noeta_home})"


@pytest.mark.slow
def test_a_server_whose_home_was_deleted_is_stopped_by_the_next_start(noeta_home: Path) -> None:
    orphan_home = noeta_home.parent / "deleted"
    assert noeta("db", "start", env={"NOETA_HOME": str(orphan_home)}).returncode == 0
    pid = int((orphan_home / "pgdata" / "postmaster.pid").read_text().split()[0])
    assert _alive(pid)
    # Its folder gone, nothing could stop it before. (Another test session starting a
    # server at this moment may stop it first: the registry is per user, not per session.)
    # The running server may write a WAL file into pg_wal while it is being removed (then
    # rmtree finds it not empty): what was removed is enough, PG_VERSION is never rewritten.
    shutil.rmtree(orphan_home, ignore_errors=True)
    assert not (orphan_home / "pgdata" / "PG_VERSION").exists()
    result = noeta("db", "start", env={"NOETA_HOME": str(noeta_home)})
    assert result.returncode == 0, result.stderr
    deadline = time.monotonic() + 30
    while _alive(pid):  # SIGQUIT was sent before the new server started; it exits soon
        assert time.monotonic() < deadline, f"the orphaned server {pid} still runs"
        time.sleep(0.05)
    shutil.rmtree(orphan_home, ignore_errors=True)  # what it wrote while being removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"  # a zombie has exited; only its parent has not reaped it


@pytest.mark.skipif(os.geteuid() != 0, reason="the embedded server's root behaviour")
def test_as_root_a_folder_noeta_did_not_create_keeps_its_mode(noeta_home: Path) -> None:
    private = noeta_home.parent / "private"
    private.mkdir(mode=0o700)
    result = noeta("db", "start", env={"NOETA_HOME": str(private / "home")})
    assert_one_line_error(result, f"cannot enter {private} (mode 700)", "set NOETA_HOME")
    assert stat.S_IMODE(private.stat().st_mode) == 0o700
    assert stat.S_IMODE(noeta_home.parent.stat().st_mode) == 0o711  # make_home's, unchanged


def test_as_root_the_default_home_is_one_the_server_user_can_reach(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NOETA_HOME", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    expected = Path("/var/lib/noeta") if os.geteuid() == 0 else Path.home() / ".local/share/noeta"
    assert default_home() == expected
