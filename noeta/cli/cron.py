"""Cron files as people check them: `noeta cron validate` (errors, warnings),
`noeta cron list` (each schedule and its next fire) and `noeta cron history NAME` (the
slots a scheduler has handled, from the store)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, assert_never

import click

from noeta.cli.options import config_option, json_option, store_option

if TYPE_CHECKING:  # cron parsing (croniter, YAML) only for the commands that read files
    from noeta.core.ports.store import CronFireRecord
    from noeta.scheduler.cronfile import Schedule

_files = click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))


@click.group()
def cron() -> None:
    """Cron files: the schedules `noeta scheduler` fires."""


@cron.command()
@_files
@config_option
def validate(files: tuple[str, ...], config: str | None) -> None:
    """Check cron FILES: the first error (exit 1), or `ok` and any warnings (exit 0).

    A `job:` must name a @noeta.tool function of a module the --config's plugins import,
    with input that fits it, as `noeta scheduler --config` requires at start.
    """
    from noeta.scheduler.cronfile import JobAction, check_cron_file, load_cron_files

    warnings: list[str] = []
    for path in files:
        warnings += check_cron_file(path)[1]
    schedules = load_cron_files(files)  # names must also be unique across the files
    if any(isinstance(schedule.action, JobAction) for schedule in schedules):
        asyncio.run(_check_jobs(schedules, config))
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(f"ok: {len(schedules)} schedule{'' if len(schedules) == 1 else 's'}")


async def _check_jobs(schedules: list[Schedule], config_path: str | None) -> None:
    """The jobs the schedules name, looked up as the scheduler does: the config's plugins
    are opened (which imports their modules), then each job and its input are checked."""
    from noeta.config import load_config
    from noeta.plugins.toolbox import Toolbox
    from noeta.scheduler.scheduler import check_job_schedules

    toolbox = await Toolbox.open(load_config(config_path))
    try:
        check_job_schedules(schedules)
    finally:
        await toolbox.close()


@cron.command(name="list")
@_files
@click.option(
    "--after",
    type=click.DateTime(["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d"]),
    default=None,
    metavar="UTC-TIME",
    help="Show the first fire after this UTC time (default: now).",
)
@json_option
def list_schedules(files: tuple[str, ...], after: datetime | None, as_json: bool) -> None:
    """List the schedules of cron FILES with their next fire, in UTC and in their zone."""
    from noeta.scheduler.cronfile import load_cron_files
    from noeta.scheduler.slots import next_slot

    now = after.replace(tzinfo=UTC) if after else datetime.now(UTC)
    schedules = load_cron_files(files)
    nexts = [next_slot(schedule.cron, schedule.timezone, now) for schedule in schedules]
    if as_json:
        documents = [_json(s, n) for s, n in zip(schedules, nexts, strict=True)]
        click.echo(json.dumps(documents, ensure_ascii=False, indent=2))
        return
    rows = [("name", "schedule", "timezone", "enabled", "next (UTC)", "next (local)")]
    for schedule, fire in zip(schedules, nexts, strict=True):
        utc, local = _times(schedule, fire)
        enabled = "yes" if schedule.enabled else "no"
        rows.append((schedule.name, schedule.cron, schedule.timezone, enabled, utc, local))
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        click.echo(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )


def _times(schedule: Schedule, fire: datetime | None) -> tuple[str, str]:
    from noeta.scheduler.slots import zone

    if fire is None:
        return "never", "never"
    local = fire.astimezone(zone(schedule.timezone))
    return fire.strftime("%Y-%m-%d %H:%M"), local.strftime("%Y-%m-%d %H:%M %Z")


def _json(schedule: Schedule, fire: datetime | None) -> dict[str, Any]:
    from noeta.scheduler.cronfile import JobAction, MessageAction, TaskAction
    from noeta.scheduler.slots import zone

    action: dict[str, Any]
    match schedule.action:
        case TaskAction(prompt, model, queue, plugins):
            plugin_names = None if plugins is None else list(plugins)
            action = {"prompt": prompt, "model": model, "queue": queue, "plugins": plugin_names}
            kind = "task"
        case MessageAction(task, text):
            action = {"task": task, "text": text}
            kind = "message"
        case JobAction(name, given, queue):
            action = {"name": name, "input": given, "queue": queue}
            kind = "job"
        case unknown:
            assert_never(unknown)
    return {
        "name": schedule.name,
        "schedule": schedule.cron,
        "timezone": schedule.timezone,
        kind: action,
        "overlap": schedule.overlap,
        "missed": schedule.missed,
        "max_catch_up": schedule.max_catch_up,
        "enabled": schedule.enabled,
        "source": schedule.source,
        "next_utc": None if fire is None else fire.isoformat(),
        "next_local": None
        if fire is None
        else fire.astimezone(zone(schedule.timezone)).isoformat(),
    }


@cron.command()
@click.argument("name")
@click.option(
    "--limit",
    type=click.IntRange(1, 10_000),
    default=20,
    show_default=True,
    help="At most this many slots.",
)
@json_option
@store_option
def history(name: str, limit: int, as_json: bool, store: str | None) -> None:
    """The latest slots schedule NAME has handled (newest first) and what came of each."""
    import asyncio

    records = asyncio.run(_history(store, name, limit))
    if as_json:
        documents = [
            {
                "slot": r.slot.astimezone(UTC).isoformat(),
                "outcome": r.outcome.value,
                "task_id": r.task_id,
                "detail": r.detail,
                "fired_at": r.fired_at.astimezone(UTC).isoformat(),
            }
            for r in records
        ]
        click.echo(json.dumps(documents, ensure_ascii=False, indent=2))
        return
    if not records:
        click.echo(f"no slot of {name!r} has been handled yet")
        return
    for r in records:
        slot = r.slot.astimezone(UTC).strftime("%Y-%m-%d %H:%M")
        fired = r.fired_at.astimezone(UTC).strftime("%H:%M:%S")
        task = f" {r.task_id}" if r.task_id else ""
        detail = f" ({r.detail})" if r.detail else ""
        click.echo(f"{slot} UTC  {r.outcome.value:<15} at {fired}{task}{detail}")


async def _history(url: str | None, name: str, limit: int) -> list[CronFireRecord]:
    from noeta.backends.stores import open_store
    from noeta.core.errors import NoetaError

    store = await open_store(url, application_name="noeta-cron", start_embedded=False)
    try:
        known = await store.cron_schedules()
        if name not in known:
            listed = ", ".join(known) if known else "none yet (no scheduler has run one)"
            raise NoetaError(f"no schedule named {name!r} in this store; known: {listed}")
        return await store.cron_history(name, limit)
    finally:
        await store.close()
