"""Options shared by several commands."""

from __future__ import annotations

import click

# Without --model or NOETA_MODEL: the model a task is given.
DEFAULT_MODEL = "anthropic:claude-sonnet-4-5"

store_option = click.option(
    "--store",
    envvar="NOETA_STORE",
    default=None,
    metavar="URL",
    help="postgresql://… or sqlite:///PATH; default: the embedded PostgreSQL in $NOETA_HOME.",
)


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
