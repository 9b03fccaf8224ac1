"""Commands that only read never create or start the embedded server (issue 25, item 25);
a command that starts one says so on stderr in one line. The real `noeta` in a child
process, with a fresh NOETA_HOME."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from noeta.backends.stores.embedded import EmbeddedPostgres
from tests.cli.test_db import noeta, noeta_home  # noqa: F401  # the fixture

READ_ONLY = [
    ["show", "some-id"],
    ["tasks"],
    ["tail", "some-id", "--no-follow"],
    ["queue", "list"],
    ["limit", "list"],
    ["workers"],
    ["cron", "history", "tick"],
]


def servers_of(home: Path) -> list[int]:
    """The processes whose command line names `home` (a postmaster started on it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue  # gone meanwhile
            if str(home).encode() in command:
                found.append(int(entry.name))
    return found


@pytest.mark.parametrize("arguments", READ_ONLY, ids=" ".join)
def test_a_read_only_command_creates_and_starts_nothing(
    noeta_home: Path,  # noqa: F811
    arguments: list[str],
) -> None:
    result = noeta(*arguments, env={"NOETA_HOME": str(noeta_home)})
    assert result.returncode == 1, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0] == (
        f"noeta: error: the embedded PostgreSQL in {noeta_home} is not running, and a "
        "command that only reads starts none: `noeta db start` starts it (so does any "
        "command that writes, e.g. `noeta submit`), or give --store"
    )
    assert not noeta_home.exists()  # nothing created under the home
    assert servers_of(noeta_home) == []


@pytest.mark.slow
def test_a_command_that_starts_the_server_says_so_in_one_line_and_a_stopped_one_stays_stopped(
    noeta_home: Path,  # noqa: F811
) -> None:
    env = {"NOETA_HOME": str(noeta_home)}
    started = noeta("submit", "hello", "--model", "openai:gpt-4o", env=env)
    assert started.returncode == 0, started.stderr
    assert started.stderr.strip().splitlines() == [
        f"noeta: started the embedded PostgreSQL in {noeta_home} "
        "(it keeps running; `noeta db stop` stops it)"
    ]
    task_id = started.stdout.strip()
    shown = noeta("show", task_id, env=env)  # it runs: a read joins it, and says nothing
    assert shown.returncode == 0 and shown.stderr == "", shown
    assert noeta("db", "stop", env=env).returncode == 0
    stopped = noeta("show", task_id, env=env)
    assert stopped.returncode == 1 and "is not running" in stopped.stderr, stopped
    assert EmbeddedPostgres(noeta_home).status().running is False
    assert os.path.exists(noeta_home / "pgdata")  # created by the submit, kept
