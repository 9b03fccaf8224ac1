"""`noeta tasks --status failed --group-by error`: the failures by cause, a line per error
kind, kind (agent or the job's function) and queue, with how many and when the first and
last of them finished; read in one statement (`StoreViews.failure_groups`): every failure
from the search table, as the web's failures page reads them (ADR-0112), or the newest
--limit N read directly."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

from noeta.cli.text import scrubbed
from noeta.core.errors import ConfigError

if TYPE_CHECKING:
    from noeta.core.ports.store_views import FailureGroup, StoreViews

GROUPINGS = ("error",)  # what --group-by takes
NO_KIND = "-"  # an error whose kind cannot be told


BUILDING = (
    "noeta: the index of failures (the search's) is being built, once, a batch at a time "
    "(interrupted, it goes on from there next time; --limit N groups the newest N now)"
)


async def _groups(url: str | None, queue: str | None, newest: int | None) -> list[FailureGroup]:
    from noeta.client import AsyncClient

    async with AsyncClient(url, application_name="noeta-tasks", start_embedded=False) as client:
        views = (await client.store()).capabilities.views
        if views is None:
            raise ConfigError("this store cannot group tasks: it has no views")
        if newest is None:
            await _indexed(views)
        return await views.failure_groups(queue=queue, cap=newest)


async def _indexed(views: StoreViews) -> None:
    """The search table brought up to date, as the failures page does before it groups
    every failure from it (`SearchIndex.before_search`): one step once it is built; a big
    store's first time builds it here, batch by batch, saying so once."""
    if await views.index_search():
        return
    click.echo(BUILDING, err=True)
    while not await views.index_search():
        pass  # each step is a statement and a commit: an interrupted build is kept


def print_failure_groups(
    url: str | None, queue: str | None, newest: int | None, as_json: bool
) -> None:
    """The groups of every failure (`newest` None) or of the `newest`, the largest first."""
    groups = asyncio.run(_groups(url, queue, newest))
    if as_json:
        click.echo(json.dumps([_json(group) for group in groups], ensure_ascii=False, indent=2))
        return
    if not groups:
        click.echo("no failed tasks")
        return
    rows = [["count", "error", "kind", "queue", "first", "last"]]
    for group in groups:
        rows.append(
            [
                f"{group.count:,}",
                scrubbed(group.error_kind) or NO_KIND,
                scrubbed(group.kind),
                group.queue,
                _moment(group.first_at),
                _moment(group.last_at),
            ]
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        click.echo(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    if newest is not None and sum(group.count for group in groups) >= newest:
        said = f"noeta: the newest {newest:,} failures are grouped (without --limit: every one)"
        click.echo(said, err=True)
    click.echo(
        "noeta: retry a group with `noeta retry --status failed --error KIND --name KIND "
        "--queue QUEUE` (--dry-run counts first)",
        err=True,
    )


def _moment(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _json(group: FailureGroup) -> dict[str, object]:
    return {
        "error_kind": scrubbed(group.error_kind),
        "kind": scrubbed(group.kind),
        "queue": group.queue,
        "count": group.count,
        "first_at": group.first_at.isoformat(),
        "last_at": group.last_at.isoformat(),
    }
