"""`noeta queue set` and `noeta queue list`: the fleet-wide limits of a queue, kept in the
store so every worker obeys the same (ADR-0073), and what each queue holds now."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import click

from noeta.cli.options import json_option, store_option
from noeta.core.errors import ConfigError
from noeta.core.ports.queue_settings import QueueChange, QueueOverview, QueueSettings, parse_rate
from noeta.core.ports.store import check_key


@click.group()
def queue() -> None:
    """Queues' fleet-wide limits: concurrency, per key, rate, pause."""


@queue.command(name="set")
@click.argument("name")
@click.option(
    "--concurrency", type=int, default=None, help="At most N running at once, fleet-wide."
)
@click.option(
    "--per-key", type=int, default=None, help="At most N running with the same concurrency key."
)
@click.option(
    "--rate",
    default=None,
    metavar="N/PERIOD",
    help="At most N claims started per PERIOD (s, m, h, d; 10/s, 600/m, 5/30s).",
)
@click.option(
    "--paused/--resumed",
    default=None,
    help="A paused queue is not claimed (its running tasks go on); --resumed wakes workers.",
)
@click.option("--clear", is_flag=True, help="Remove every setting: the queue runs unlimited.")
@store_option
def set_queue(
    name: str,
    concurrency: int | None,
    per_key: int | None,
    rate: str | None,
    paused: bool | None,
    clear: bool,
    store: str | None,
) -> None:
    """Set queue NAME's limits (those not given stay as they were)."""
    check_key("queue name", name)
    given = [concurrency, per_key, rate, paused]
    if clear:
        if any(value is not None for value in given):
            raise ConfigError("--clear removes every setting: give it alone")
        cleared = asyncio.run(_clear(store, name))
        click.echo(f"{name}: settings cleared" if cleared else f"{name}: had no settings")
        return
    if all(value is None for value in given):
        raise ConfigError(
            "nothing to set: give --concurrency, --per-key, --rate, --paused, --resumed or --clear"
        )
    change = QueueChange(concurrency, per_key, None if rate is None else parse_rate(rate), paused)
    change.applied_to(QueueSettings(name))  # every value checked before connecting
    overview = asyncio.run(_set(store, name, change))
    click.echo(_line(overview))
    limit = overview.settings.concurrency
    if limit is not None and overview.running > limit:
        click.echo(
            f"noeta: queue {name}: {overview.running} running, above the limit of {limit}: "
            f"they finish; no new claims until fewer than {limit} run",
            err=True,
        )


@queue.command(name="list")
@click.argument("names", nargs=-1)
@json_option
@store_option
def list_queues(names: tuple[str, ...], as_json: bool, store: str | None) -> None:
    """Every queue with settings or tasks (or NAMES): claimable now, running, waiting for
    a slot, scheduled later, the busiest keys and the settings."""
    for name in names:
        check_key("queue name", name)
    overviews = asyncio.run(_list(store, names))
    if as_json:
        click.echo(json.dumps([_document(o) for o in overviews], indent=2, ensure_ascii=False))
        return
    if not overviews:
        click.echo("no queue has settings or tasks")
        return
    for overview in overviews:
        click.echo(_line(overview))


def _line(o: QueueOverview) -> str:
    shown = ", ".join(o.limits()) or "no limits"
    keys = " ".join(f"{key}={count}" for key, count in o.running_by_key.items())
    later = f", {o.scheduled} scheduled later" if o.scheduled else ""
    return (
        f"{o.queue}: {o.claimable} claimable, {o.running} running, "
        f"{o.waiting_for_slot} waiting for a slot{later}; {shown}"
        + (f"; running by key: {keys}" if keys else "")
    )


def _document(o: QueueOverview) -> dict[str, Any]:
    s = o.settings
    return {
        "queue": o.queue,
        "claimable": o.claimable,
        "running": o.running,
        "waiting_for_slot": o.waiting_for_slot,
        "scheduled": o.scheduled,
        "running_by_key": dict(o.running_by_key),
        "settings": {
            "concurrency": s.concurrency,
            "per_key": s.per_key_concurrency,
            "rate": None if s.rate is None else str(s.rate),
            "paused": s.paused,
        }
        if o.has_settings
        else None,
    }


async def _set(url: str | None, name: str, change: QueueChange) -> QueueOverview:
    from noeta.client import AsyncClient

    async with AsyncClient(url, application_name="noeta-queue") as client:
        return await client.set_queue(
            name,
            concurrency=change.concurrency,
            per_key=change.per_key_concurrency,
            rate=change.rate,
            paused=change.paused,
        )


async def _clear(url: str | None, name: str) -> bool:
    from noeta.client import AsyncClient

    async with AsyncClient(url, application_name="noeta-queue") as client:
        return await client.clear_queue(name)


async def _list(url: str | None, names: Sequence[str]) -> list[QueueOverview]:
    from noeta.client import AsyncClient

    async with AsyncClient(url, application_name="noeta-queue", start_embedded=False) as client:
        return await client.queues(*names)
