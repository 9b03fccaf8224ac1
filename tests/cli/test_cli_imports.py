"""What each `noeta` command imports (ADR-0056): a fast start is a matter of imports, so
the heavy ones are kept out of the commands that do not use them. Real processes run
with `python -X importtime`, which lists every module a run imports; no time is asserted
here (bench/cli.py prints the times)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys

import click
import pytest

from noeta.backends.stores import migrate_store
from noeta.cli.command_table import COMMANDS
from noeta.cli.main import cli

# Never for a help page, nor for submitting or listing tasks.
HEAVY = (
    "noeta.worker",
    "noeta.core.runner",
    "noeta.core.rules.fold",
    "noeta.backends.models.anthropic",
    "noeta.backends.models.openai",
    "noeta.observability.export",
    "jsonschema",
    "httpx",
    "httpcore",
    "opentelemetry",
)
# Nor for a help page: the drivers, the client and the tools.
DRIVERS = ("psycopg", "psycopg_pool", "noeta.client", "noeta.plugins", "noeta.backends.stores.")


def imported(*arguments: str, store: str = "sqlite:///nowhere.db") -> set[str]:
    """Every module `noeta ARGUMENTS` imports; the command must succeed."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("NOETA_", "OTEL_"))}
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "noeta", *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        env={**environment, "NOETA_STORE": store},
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    names = set(re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", result.stderr, re.M))
    assert "noeta.cli.main" in names, result.stderr[-2000:]
    return names


def loaded(names: set[str], prefixes: tuple[str, ...]) -> list[str]:
    """The modules of `names` that are, or are inside, one of `prefixes`."""
    return sorted(
        name
        for name in names
        for prefix in prefixes
        if name == prefix.rstrip(".") or name.startswith(prefix.rstrip(".") + ".")
    )


def test_noeta_help_imports_no_command_module_and_nothing_heavy() -> None:
    names = imported("--help")
    assert loaded(names, (*HEAVY, *DRIVERS, "yaml", "croniter")) == []
    assert loaded(names, tuple(entry.where.split(":")[0] for entry in COMMANDS.values())) == []


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_commands_help_imports_only_that_command(command: str) -> None:
    names = imported(command, "--help")
    assert loaded(names, (*HEAVY, *DRIVERS)) == []
    others = {entry.where.split(":")[0] for name, entry in COMMANDS.items() if name != command}
    others.discard(COMMANDS[command].where.split(":")[0])  # a module holding several
    assert loaded(names, tuple(others)) == []


def test_submit_and_tasks_against_a_store_import_no_runner_tools_or_http(
    postgres_url: str,
) -> None:
    asyncio.run(migrate_store(postgres_url))
    submitted = imported("submit", "--queue", "imports", "hello", store=postgres_url)
    listed = imported("tasks", "--queue", "imports", store=postgres_url)
    for names in (submitted, listed):
        assert "psycopg" in names  # it really talked to the store
        assert loaded(names, (*HEAVY, "yaml", "croniter")) == []
        # A store URL is given: nothing of the embedded server is needed.
        assert loaded(names, ("noeta.backends.stores.embedded",)) == []
    # A task submitted without tools gets its worker's (ADR-0088): submit loads no plugin.
    plugins = ("noeta.plugins.core", "noeta.plugins.toolbox", "noeta.plugins.mcp")
    assert loaded(submitted, plugins) == []
    assert loaded(listed, (*plugins, "noeta.config")) == []


def test_the_table_summary_is_each_commands_own_first_sentence() -> None:
    context = click.Context(cli, info_name="noeta")
    for name, entry in COMMANDS.items():
        command = cli.get_command(context, name)
        assert command is not None, name
        own = command.get_short_help_str(limit=1_000)
        shown = click.Command(name, help=entry.summary).get_short_help_str(limit=1_000)
        assert shown == own, f"{name}: the table says {shown!r}, the command {own!r}"
