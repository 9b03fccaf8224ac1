"""`noeta db …`: the store's schema, pruning finished tasks, and the embedded PostgreSQL
server (status, start, stop) that the default store runs in $NOETA_HOME."""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta
from typing import TYPE_CHECKING

import click

from noeta.cli.options import json_option, store_option
from noeta.core.errors import ConfigError
from noeta.core.ports.retention import DEFAULT_BATCH_SIZE

if TYPE_CHECKING:
    from noeta.core.ports.retention import PruneCounts


@click.group()
def db() -> None:
    """The store's schema, and the embedded PostgreSQL server in $NOETA_HOME."""


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


@db.command()
@click.option(
    "--finished-before",
    "age",
    required=True,
    metavar="DURATION",
    help="Prune tasks that finished longer ago than this: 30m, 12h, 7d, 2w (0s: all).",
)
@click.option("--queue", default=None, metavar="QUEUE", help="Only tasks of this queue.")
@click.option("--dry-run", is_flag=True, help="Count what would be pruned; remove nothing.")
@click.option(
    "--forget-ids",
    is_flag=True,
    help="Let these pruned ids, and every id pruned before, be used again; by default a "
    "pruned task's id stays taken.",
)
@click.option(
    "--batch-size",
    type=click.IntRange(1, 100_000),
    default=DEFAULT_BATCH_SIZE,
    show_default=True,
    help="Tasks per transaction: each batch is one short transaction.",
)
@store_option
def prune(
    age: str,
    queue: str | None,
    dry_run: bool,
    forget_ids: bool,
    batch_size: int,
    store: str | None,
) -> None:
    """Remove finished tasks (done, failed, cancelled) with their logs, inbox, snapshots,
    late results and cron history, online, in small batches. A subtask whose parent is
    live, and a task with a live subtask, are kept. Refused while another prune runs."""
    from noeta.core.ports.retention import parse_duration

    older_than = parse_duration(age)
    counts = asyncio.run(_prune(store, older_than, queue, dry_run, forget_ids, batch_size))
    verb = "would prune" if dry_run else "pruned"
    click.echo(f"{verb} {counts.tasks} finished tasks ({counts.events} events)")


async def _prune(
    url: str | None,
    older_than: timedelta,
    queue: str | None,
    dry_run: bool,
    forget_ids: bool,
    batch_size: int,
) -> PruneCounts:
    from noeta.backends.stores import open_store

    store = await open_store(url, application_name="noeta-prune", max_connections=2)
    try:
        pruning = store.capabilities.pruning
        if pruning is None:
            raise ConfigError(f"this store ({type(store).__name__}) cannot prune")
        return await pruning.prune_finished(
            older_than,
            queue=queue,
            forget_ids=forget_ids,
            dry_run=dry_run,
            batch_size=batch_size,
        )
    finally:
        await store.close()


@db.command()
@json_option
def status(as_json: bool) -> None:
    """Where the embedded server is, whether it runs, its port, version and size on disk."""
    import json

    from noeta.backends.stores.embedded import EmbeddedPostgres
    from noeta.backends.stores.embedded_home import default_home

    found = EmbeddedPostgres(default_home()).status()
    if as_json:
        document = {
            "home": str(found.home),
            "initialised": found.initialised,
            "running": found.running,
            "port": found.port,
            "postgresql": found.version,
            "size_bytes": found.size_bytes,
        }
        click.echo(json.dumps(document, indent=2))
        return
    state = f"running on 127.0.0.1:{found.port}" if found.running else "not running"
    if not found.initialised:
        state = "not created yet (the first command that needs it creates it)"
    click.echo(f"home:       {found.home}")
    click.echo(f"server:     {state}")
    click.echo(f"postgresql: {found.version or '-'}")
    click.echo(f"size:       {_size(found.size_bytes)}")
    if os.environ.get("NOETA_STORE"):
        click.echo("note:       NOETA_STORE is set: commands use that store, not this server")


@db.command()
def start() -> None:
    """Start the embedded server (creating it the first time) and bring its schema up to
    date; nothing to do if it runs already."""
    asyncio.run(_migrate_embedded())
    from noeta.backends.stores.embedded import EmbeddedPostgres
    from noeta.backends.stores.embedded_home import default_home

    found = EmbeddedPostgres(default_home()).status()
    click.echo(f"running on 127.0.0.1:{found.port} in {found.home}")


async def _migrate_embedded() -> None:
    from noeta.backends.stores import open_store

    store = await open_store(None, application_name="noeta-db", max_connections=1)
    await store.close()


@db.command()
@click.option(
    "--mode",
    type=click.Choice(["smart", "fast", "immediate"]),
    default="fast",
    show_default=True,
    help="smart waits for clients to leave; fast ends their sessions; immediate does not "
    "shut down cleanly (recovery at the next start).",
)
def stop(mode: str) -> None:
    """Stop the embedded server; the next command that needs it starts it again."""
    from noeta.backends.stores.embedded import EmbeddedPostgres
    from noeta.backends.stores.embedded_home import default_home

    server = EmbeddedPostgres(default_home())
    if not server.status().running:
        click.echo(f"not running ({server.root})")
        return
    server.stop(mode=mode)
    click.echo(f"stopped ({server.root})")


def _size(count: int) -> str:
    size = float(count)
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")
