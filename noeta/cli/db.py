"""`noeta db …`: the store's schema."""

from __future__ import annotations

import asyncio

import click

from noeta.cli.options import store_option


@click.group()
def db() -> None:
    """Manage the store's schema."""


@db.command()
@store_option
def migrate(store: str | None) -> None:
    """Apply pending schema migrations (safe to run twice, or from two places at once)."""
    applied = asyncio.run(_migrate(store))
    if applied:
        for version, name in applied:
            click.echo(f"applied {version:04d}_{name}")
    else:
        click.echo("the schema is up to date")


async def _migrate(url: str | None) -> list[tuple[int, str]]:
    from noeta.backends.stores import migrate_store

    return [(migration.version, migration.name) for migration in await migrate_store(url)]
