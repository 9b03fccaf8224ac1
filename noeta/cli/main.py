"""The `noeta` command line: one click group; every NoetaError becomes one line and exit 1."""

from __future__ import annotations

import sys
from typing import Any

import click

from noeta.cli import answer, cron, db, run, scheduler, tasks, worker


class NoetaGroup(click.Group):
    """Turns noeta's own errors into one readable line instead of a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        from noeta.core.errors import NoetaError

        try:
            return super().invoke(ctx)
        except NoetaError as error:
            click.echo(f"noeta: error: {error}", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            click.echo("noeta: interrupted", err=True)
            sys.exit(130)


@click.group(cls=NoetaGroup)
@click.version_option(package_name="noeta")
def cli() -> None:
    """noeta: durable AI-agent tasks on PostgreSQL."""


cli.add_command(db.db)
cli.add_command(run.run)
cli.add_command(tasks.show)
cli.add_command(answer.answer)
cli.add_command(tasks.submit)
cli.add_command(tasks.send)
cli.add_command(tasks.tasks)
cli.add_command(tasks.tail)
cli.add_command(tasks.cancel)
cli.add_command(worker.worker)
cli.add_command(cron.cron)
cli.add_command(scheduler.scheduler)


def main() -> None:
    cli(prog_name="noeta")
