"""`noeta workers`: the registry of workers (ADR-0100), each with what it holds now, what
it has done and when it was last seen; --all adds the recently dead and stopped."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import click

from noeta.cli.options import json_option, store_option

if TYPE_CHECKING:
    from noeta.client.fleet import Fleet, FleetWorker

HEADINGS = (
    "name",
    "state",
    "host",
    "pid",
    "version",
    "queues",
    "concurrency",
    "held",
    "processed",
    "failed",
    "last seen",
)


@click.command()
@click.option(
    "--all",
    "departed",
    is_flag=True,
    help="Also the workers that died (silent past their lease) or stopped in the last hour.",
)
@json_option
@store_option
def workers(departed: bool, as_json: bool, store: str | None) -> None:
    """List the live workers: host, pid, version, queues, tasks held, processed, failed."""
    from noeta.client.fleet import seen_ago

    fleet = asyncio.run(_read(store, departed))
    if as_json:
        document = [_document(each, fleet) for each in fleet.workers]
        click.echo(json.dumps(document, indent=2, ensure_ascii=False))
        return
    if not fleet.workers:
        click.echo("no worker in the registry" if departed else "no live worker")
    else:
        rows = [HEADINGS]
        for each in fleet.workers:
            w = each.worker
            rows.append(
                (
                    w.id,
                    w.state,
                    w.host or "-",
                    str(w.pid or "-"),
                    w.version or "-",
                    ",".join(w.queues),
                    str(w.concurrency or "-"),
                    str(len(each.held)),
                    str(w.processed),
                    str(w.failed),
                    seen_ago(w, fleet.clock),
                )
            )
        widths = [max(len(row[column]) for row in rows) for column in range(len(HEADINGS))]
        for row in rows:
            cells = zip(row, widths, strict=True)
            click.echo("  ".join(cell.ljust(width) for cell, width in cells).rstrip())
    for owner, held in fleet.unlisted.items():
        click.echo(f"{owner} (not in the registry) holds {len(held)} task(s)")
    if fleet.held_capped:
        click.echo("(the first 1000 held tasks were counted)")


def _document(each: FleetWorker, fleet: Fleet) -> dict[str, Any]:
    w = each.worker
    return {
        "name": w.id,
        "state": w.state,
        "host": w.host,
        "pid": w.pid,
        "version": w.version,
        "queues": list(w.queues),
        "offers": None if w.offers is None else list(w.offers),
        "concurrency": w.concurrency,
        "held": [claim.task_id for claim in each.held],
        "processed": w.processed,
        "failed": w.failed,
        "started_at": None if w.started_at is None else w.started_at.isoformat(),
        "last_seen": None if w.last_seen is None else w.last_seen.isoformat(),
        "seconds_since_seen": None
        if w.last_seen is None
        else round((fleet.clock - w.last_seen).total_seconds(), 3),
    }


async def _read(url: str | None, departed: bool) -> Fleet:
    from noeta.client import AsyncClient
    from noeta.client.fleet import read_fleet

    async with AsyncClient(url, application_name="noeta-workers", start_embedded=False) as client:
        return await read_fleet(await client.store(), departed)
