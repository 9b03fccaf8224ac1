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
