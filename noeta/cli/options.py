"""Options shared by several commands."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

# Without --model or NOETA_MODEL: the model a task is given.
DEFAULT_MODEL = "anthropic:claude-sonnet-4-5"

# The commands whose process runs tasks: a task's commands can read its command line.
RUNS_TASKS = ("worker", "run")
_STORE_FROM_FILE = "noeta.store_from_file"
MAX_STORE_FILE_BYTES = 64 * 1024


def store_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """--store URL and --store-file FILE; the command receives the URL as `store`."""
    with_file = click.option(
        "--store-file",
        metavar="FILE",
        default=None,
        is_eager=True,  # read before --store, which takes its URL
        expose_value=False,
        callback=_read_store_file,
        help="Read the store URL from FILE (one line): keeps a password off the command line.",
    )
    return click.option(
        "--store",
        envvar="NOETA_STORE",
        default=None,
        metavar="URL",
        callback=_store_url,
        help=(
            "postgresql://… or sqlite:///PATH; default: the embedded PostgreSQL in "
            "$NOETA_HOME. Every process can read a command line: give a password through "
            "NOETA_STORE, --store-file or PGPASSWORD/PGPASSFILE (`worker` and `run` refuse "
            "one here)."
        ),
    )(with_file(command))


def _read_store_file(ctx: click.Context, _: click.Parameter, path: str | None) -> None:
    if path is None:
        return
    from noeta.core.errors import ConfigError

    try:
        with open(path, "rb") as file:
            data = file.read(MAX_STORE_FILE_BYTES + 1)
    except OSError as error:
        raise ConfigError(f"cannot read --store-file {path}: {error.strerror}") from None
    lines = [line.strip() for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
    if len(data) > MAX_STORE_FILE_BYTES or len(lines) != 1:
        raise ConfigError(f"--store-file {path} must hold one store URL on one line")
    ctx.meta[_STORE_FROM_FILE] = lines[0]


def _store_url(ctx: click.Context, param: click.Parameter, url: str | None) -> str | None:
    from click.core import ParameterSource

    given = ctx.get_parameter_source(param.name or "store") is ParameterSource.COMMANDLINE
    from_file = ctx.meta.pop(_STORE_FROM_FILE, None)
    if from_file is not None:
        if given:
            from noeta.core.errors import ConfigError

            raise ConfigError("give --store or --store-file, not both")
        return str(from_file)
    if url and given:
        refuse_a_password_on_the_command_line(url, ctx.info_name or "")
    return url


def refuse_a_password_on_the_command_line(url: str, command: str) -> None:
    """A store password in argv is readable by every process (/proc/PID/cmdline): refused
    for the commands that run tasks, a warning on stderr for the others."""
    from noeta.backends.stores.urls import holds_password, masked
    from noeta.core.errors import ConfigError

    if not holds_password(url):
        return
    problem = (
        f"--store {masked(url)} puts a password on the command line, where every process "
        "on this machine can read it"
    )
    advice = (
        "give the URL in NOETA_STORE or --store-file FILE, or leave the password out of "
        "it and set PGPASSWORD or PGPASSFILE"
    )
    if command in RUNS_TASKS:
        raise ConfigError(f"{problem}, the tasks' commands too: {advice}")
    click.echo(f"noeta: warning: {problem}; {advice}", err=True)


def check_store_url(url: str | None) -> None:
    """ConfigError for a malformed store URL (given, or from NOETA_STORE), before a
    long-running command starts anything; the embedded default needs no check."""
    from noeta.backends.stores import resolve_url, store_kind

    resolved = resolve_url(url)
    if resolved is not None:
        store_kind(resolved)


json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print JSON for scripts instead of text for people."
)

config_option = click.option(
    "--config",
    envvar="NOETA_CONFIG",
    default=None,
    metavar="FILE",
    help="The noeta config file (plugins, gates, workspaces); default: built-in tools only.",
)

progress_option = click.option(
    "--no-progress",
    "show_progress",
    is_flag=True,
    flag_value=False,
    default=True,
    help="No live status line on stderr (shown only when stderr is a terminal).",
)
