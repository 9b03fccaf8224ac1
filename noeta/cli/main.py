"""The `noeta` command line: one click group; every error becomes one line on stderr."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from noeta.cli.command_table import LazyGroup
from noeta.cli.environment import describe_environment, show_version

# Exit codes: 1 an error noeta reports, 2 a command line click cannot read, 130 Ctrl-C,
# 141 its output's reader went away (as a shell reports a process SIGPIPE ended).
USAGE_EXIT, INTERRUPTED_EXIT, BROKEN_PIPE_EXIT = 2, 130, 141


class NoetaGroup(LazyGroup):
    """Turns every error into one readable line instead of a traceback or a usage page;
    its commands are imported only when one runs (command_table.py)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        try:
            code = super().main(*args, **kwargs)
        except click.UsageError as error:
            hint = f" (see {error.ctx.command_path} --help)" if error.ctx else ""
            fail(f"{error.format_message()}{hint}", USAGE_EXIT)
        except click.ClickException as error:  # a file click could not open, …
            fail(error.format_message(), error.exit_code)
        except (click.Abort, KeyboardInterrupt):
            click.echo("noeta: interrupted", err=True)
            sys.exit(INTERRUPTED_EXIT)
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        from noeta.core.errors import NoetaError

        try:
            return super().invoke(ctx)
        except NoetaError as error:
            fail(str(error), 1)
        except (click.ClickException, click.Abort, click.exceptions.Exit, KeyboardInterrupt):
            raise
        except BrokenPipeError:  # `noeta … | head`: the reader has what it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error
            sys.exit(BROKEN_PIPE_EXIT)
        except Exception as error:  # a bug: still one line, and no secret in it
            if os.environ.get("NOETA_TRACEBACK"):
                raise
            fail(
                f"unexpected {type(error).__name__}: {_scrubbed(str(error))} "
                "(a bug in noeta; NOETA_TRACEBACK=1 shows where)",
                1,
            )


def _scrubbed(text: str) -> str:
    """`text` without the secrets this process holds (keys, the store's password)."""
    from noeta.backends.stores import resolve_url
    from noeta.redaction import Scrubber

    scrub = Scrubber()
    scrub.add_environment()
    url = resolve_url(None)
    if url:
        scrub.add_url(url)
    return scrub(text)


def fail(message: str, code: int) -> None:
    click.echo(f"noeta: error: {' '.join(message.split())}", err=True)
    sys.exit(code)


@click.group(cls=NoetaGroup)
@click.option(
    "--store",
    envvar="NOETA_STORE",
    default=None,
    metavar="URL",
    is_eager=True,  # read before --version, which shows it
    help="The store for every command (as if NOETA_STORE were set); see a command's --store.",
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    callback=show_version,
    help="Show noeta's version, the store in use (password masked) and its schema version.",
)
@click.pass_context
def cli(ctx: click.Context, store: str | None) -> None:
    """noeta: durable AI-agent tasks on PostgreSQL."""
    from click.core import ParameterSource

    if store and ctx.get_parameter_source("store") is ParameterSource.COMMANDLINE:
        from noeta.cli.options import refuse_a_password_on_the_command_line

        refuse_a_password_on_the_command_line(store, ctx.invoked_subcommand or "")
    if store:
        os.environ["NOETA_STORE"] = store  # the default of each command's own --store


describe_environment(cli, "noeta")


def main() -> None:
    cli(prog_name="noeta")
