"""`noeta export` writes task logs as JSON lines; `noeta replay` reads logs (from the store
or such a file) and says where this noeta parts from one (noeta/core/rules/replay.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import datetime
from typing import TYPE_CHECKING, TextIO

import click

from noeta.cli.options import store_option
from noeta.core.errors import ConfigError
from noeta.core.ports.store import TaskStatus

if TYPE_CHECKING:
    from noeta.core.ports.store import StoredEvent

STATUSES = click.Choice([status.value for status in TaskStatus])


@click.command()
@click.argument("task_ids", nargs=-1)
@click.option("--status", type=STATUSES, default=None, help="Every task with this status.")
@click.option(
    "--limit",
    type=click.IntRange(1, 1_000_000),
    default=1000,
    show_default=True,
    help="At most this many tasks, the newest first.",
)
@store_option
def export(task_ids: tuple[str, ...], status: str | None, limit: int, store: str | None) -> None:
    """Write task logs as JSON lines: one event a line, as stored, byte for byte.

    Names the tasks TASK_IDS, or with --status the newest --limit of them. Every request's
    hash and every reply is in it, for `noeta replay` or an evaluation set: treat the file
    as you would the database (what a tool printed is in it, unscrubbed).
    """
    if not task_ids and status is None:
        raise ConfigError("name the tasks to export, or --status to pick them")

    async def written() -> None:
        async for log in _logs(store, task_ids, status, limit):
            for event in log:
                click.echo(json.dumps(_line(event), ensure_ascii=False))

    asyncio.run(written())


@click.command()
@click.argument("files", nargs=-1, type=click.File("r", encoding="utf-8"))
@click.option("--task", "task_ids", multiple=True, help="A task of the store (repeatable).")
@click.option("--status", type=STATUSES, default=None, help="Every task with this status.")
@click.option(
    "--limit",
    type=click.IntRange(1, 1_000_000),
    default=1000,
    show_default=True,
    help="At most this many tasks, the newest first.",
)
@store_option
def replay(
    files: tuple[TextIO, ...],
    task_ids: tuple[str, ...],
    status: str | None,
    limit: int,
    store: str | None,
) -> None:
    """Fold task logs with this noeta and say where it parts from one; exit 1 if any.

    Reads FILES (`noeta export`'s JSON lines; `-` standard input), or the store's tasks
    (--task, or the newest --limit, of one --status if given). A log parts when this noeta
    cannot read an event (written by a newer one), cannot fold the log, or would not have
    written a step the log records: check a deploy against logs before it meets them.
    """
    from noeta.core.rules.replay import replay as replayed

    if files and (task_ids or status is not None):
        raise ConfigError("replay files or the store's tasks, not both")

    async def differing() -> tuple[int, int]:
        logs = _read_files(files) if files else _logs(store, task_ids, status, limit, True)
        count = differ = 0
        async for log in logs:
            count += 1
            parted = replayed(log)
            if parted is not None:
                differ += 1
                click.echo(f"{log[0].task_id if log else '?'}: {parted}")
        return count, differ

    count, differ = asyncio.run(differing())
    click.echo(f"replayed {count} log{'s' * (count != 1)}: {differ} part from this noeta")
    if differ:
        raise SystemExit(1)


async def _logs(
    url: str | None,
    task_ids: tuple[str, ...],
    status: str | None,
    limit: int,
    every: bool = False,
) -> AsyncIterator[list[StoredEvent]]:
    from noeta.client import AsyncClient

    async with AsyncClient(url, application_name="noeta-replay") as client:
        store = await client.store()
        ids = list(task_ids)
        if not ids and (status is not None or every):
            ids = [record.id for record in await client.tasks(status=status, limit=limit)]
        for task_id in ids:
            log = await store.read_log(task_id)
            if not log and await store.get_task(task_id) is None:
                raise ConfigError(f"no task has the id {task_id!r}")
            yield log


async def _read_files(files: tuple[TextIO, ...]) -> AsyncIterator[list[StoredEvent]]:
    """Each task's events, in the order the files hold them, a log per task."""
    from noeta.core.ports.store import StoredEvent

    logs: dict[str, list[StoredEvent]] = {}
    for file in files:
        for number, text in enumerate(file, 1):
            if not text.strip():
                continue
            where = f"{file.name}, line {number}"
            try:
                row = json.loads(text)
                event = StoredEvent(
                    str(row["task"]),
                    int(row["seq"]),
                    str(row["type"]),
                    row["data"],
                    datetime.fromisoformat(row["created_at"]),
                    int(row.get("epoch", 0)),
                    row.get("owner"),
                )
            except (ValueError, KeyError, TypeError) as error:
                raise ConfigError(
                    f"{where}: not an event of `noeta export` ({error}); a truncated file?"
                ) from None
            logs.setdefault(event.task_id, []).append(event)
    for log in logs.values():
        yield log


def _line(event: StoredEvent) -> dict[str, object]:
    return {
        "task": event.task_id,
        "seq": event.seq,
        "type": event.type,
        "data": event.data,
        "created_at": event.created_at.isoformat(),
        "epoch": event.epoch,
        "owner": event.owner,
    }
