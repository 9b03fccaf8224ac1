"""Help that tells everything: every option described, the environment each command
reads, and `noeta --version` with the store in use (masked) and its schema."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click

from noeta.backends.stores.migrations import load_migrations
from noeta.cli.main import cli

NOETA = str(Path(sys.executable).parent / "noeta")


def commands(command: click.Command, path: str = "noeta") -> Iterator[tuple[str, click.Command]]:
    """Every command, the lazy ones imported as `noeta <name> --help` would."""
    yield path, command
    if isinstance(command, click.Group):
        context = click.Context(command, info_name=path)
        for name in command.list_commands(context):
            sub = command.get_command(context, name)
            assert sub is not None, f"{path} {name} is listed but cannot be found"
            yield from commands(sub, f"{path} {name}")


def test_the_walk_reaches_every_command() -> None:
    paths = {path for path, _ in commands(cli)}
    assert {"noeta submit", "noeta worker", "noeta db status", "noeta cron history"} <= paths


def test_every_option_is_described_and_every_command_names_its_environment() -> None:
    for path, command in commands(cli):
        assert command.help, f"{path} has no description"
        for option in command.params:
            if isinstance(option, click.Option):
                assert option.help, f"{path} {option.opts[0]} is not described"
        epilog = command.epilog or ""
        assert "Environment:" in epilog, f"{path} does not name what it reads"
        names = {option.name for option in command.params}
        if "store" in names:
            assert "NOETA_STORE" in epilog and "NOETA_HOME" in epilog, path
            assert "NOETA_STORE_SESSION" in epilog, path
        if "config" in names:
            assert "NOETA_CONFIG" in epilog, path
        if path in ("noeta", "noeta run", "noeta worker"):
            for variable in ("NOETA_FAILPOINTS", "OTEL_*", "ANTHROPIC_API_KEY"):
                assert variable in epilog, (path, variable)


def test_the_help_people_see_lists_the_environment() -> None:
    shown = subprocess.run(
        [NOETA, "worker", "--help"], capture_output=True, text=True, check=True
    ).stdout
    environment = shown.split("Environment:")[1]
    assert [line.split()[0] for line in environment.strip().splitlines()[:3]] == [
        "NOETA_STORE",
        "NOETA_HOME",
        "NOETA_CONFIG",
    ]
    assert "--lease SECONDS [1-3600]" in shown


def version(*arguments: str) -> list[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("NOETA_")}
    result = subprocess.run(
        [NOETA, *arguments, "--version"],
        capture_output=True,
        text=True,
        env=environment,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0 and result.stderr == "", result.stderr
    return result.stdout.splitlines()


def test_version_shows_the_store_masked_and_the_schema(tmp_path: Path) -> None:
    shipped = load_migrations("postgres")[-1].version
    url = f"sqlite:///{tmp_path / 'n.db'}"
    assert version("--store", url)[1:] == [
        f"store: {url}",
        f"schema: {shipped} (this noeta's); the store's: none yet (the sqlite file does not exist)",
    ]
    assert subprocess.run([NOETA, "db", "migrate", "--store", url], check=False).returncode == 0
    lines = version("--store", url)
    assert lines[0].startswith("noeta ") and lines[0].split()[1][0].isdigit()
    assert lines[2] == f"schema: {shipped} (this noeta's); the store's: {shipped} (current)"
    secret = "postgresql://u:s3cr%25et@127.0.0.1:1/x"
    lines = version("--store", secret)
    assert lines[1] == "store: postgresql://u:***@127.0.0.1:1/x"
    assert "cannot connect to PostgreSQL at 127.0.0.1:1/x" in lines[2]
    assert "s3cr" not in "\n".join(lines)


def test_a_reader_that_goes_away_is_no_error(tmp_path: Path) -> None:
    """`noeta … | head -1`: the rest of the output has nowhere to go; that is not a bug."""
    environment = {**os.environ, "NOETA_HOME": str(tmp_path / "home")}
    process = subprocess.Popen(
        [NOETA, "db", "status"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # before it writes: every line it writes meets a closed pipe
    errors = process.stderr.read().decode()
    assert process.wait(timeout=60) == 141 and errors == "", errors
