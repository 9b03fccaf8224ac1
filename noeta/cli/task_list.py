"""`noeta tasks`: the task list for operators, newest first: kind (agent or the job's
function), a one-line input, status with the error's kind, runtime, attempts, created
and finished; the columns chosen with --columns, filtered by job name, error kind, time;
with --cost, what each cost (its subtasks included), sortable by it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import click

from noeta.cli.options import config_option, json_option, store_option
from noeta.cli.text import scrubbed, task_json, unrunnable, waiting_json, waiting_text
from noeta.core.errors import ConfigError
from noeta.core.ports.store import TaskStatus, check_key
from noeta.core.ports.store_views import (
    ERROR_KIND_NAME,
    MAX_PAGE,
    TaskCursor,
    TaskFilter,
    TaskSummary,
    checked_search,
)
from noeta.task_columns import runtime, shown_error_kind, since

if TYPE_CHECKING:
    from noeta.client.task_costs import TaskUsage
    from noeta.core.ports.store import TaskRecord
    from noeta.core.ports.store_views import StoreViews
    from noeta.core.rules.prices import Price

INDEX_STEPS = 25  # batches of the search's index a search brings in (ADR-0102)


@dataclass(frozen=True, slots=True)
class Listed:
    """One task of the list: its row, its summary, what it waits for that no worker has."""

    record: TaskRecord
    summary: TaskSummary | None
    needs: tuple[str, ...] | None
    usage: TaskUsage | None = None  # read only when the cost is shown or sorted by


def _moment(at: datetime | None) -> str:
    return "-" if at is None else at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _status(listed: Listed) -> str:
    kind = shown_error_kind(listed.summary)
    return listed.record.status.value + (f" ({kind})" if kind else "") + waiting_text(listed.needs)


def _cost(listed: Listed) -> str:
    from noeta.core.rules.prices import format_usd

    if listed.usage is None:
        return "-"
    possibly = listed.usage.possibly_billed
    return format_usd(listed.usage.cost) + (f" +{possibly} possibly billed" if possibly else "")


def _summary_text(field: str) -> Callable[[Listed, datetime], str]:
    def text(listed: Listed, now: datetime) -> str:
        if listed.summary is None:
            return "-"
        return str(getattr(listed.summary, field)) or "-"

    return text


COLUMNS: dict[str, Callable[[Listed, datetime], str]] = {
    "id": lambda listed, now: listed.record.id,
    "kind": _summary_text("kind"),
    "status": lambda listed, now: _status(listed),
    "queue": lambda listed, now: listed.record.queue,
    "attempts": _summary_text("attempts"),
    "runtime": lambda listed, now: runtime(listed.summary, now),
    "created": lambda listed, now: _moment(listed.record.created_at),
    "finished": lambda listed, now: _moment(listed.summary.finished_at if listed.summary else None),
    "input": _summary_text("input"),
    "error": _summary_text("error"),
    "owner": lambda listed, now: listed.record.owner or "-",
    "epoch": lambda listed, now: str(listed.record.owner_epoch),
    "updated": lambda listed, now: _moment(listed.record.updated_at),
    "key": lambda listed, now: listed.record.concurrency_key or "-",
    "priority": lambda listed, now: str(listed.record.priority),
    "cost": lambda listed, now: _cost(listed),
}
DEFAULT_COLUMNS = "id,kind,status,queue,attempts,runtime,created,finished,input"


def _columns(_: click.Context, __: click.Parameter, value: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in COLUMNS]
    if unknown or not names:
        said = f"unknown column {unknown[0]!r}" if unknown else "no column named"
        raise click.BadParameter(f"{said} (the columns: {', '.join(COLUMNS)})")
    return names


def _since(_: click.Context, __: click.Parameter, value: str | None) -> datetime | None:
    try:
        return None if value is None else since(value, datetime.now(UTC))
    except ConfigError as error:
        raise click.BadParameter(str(error)) from None


def _search(_: click.Context, __: click.Parameter, value: str | None) -> str | None:
    try:
        return checked_search(value)
    except ConfigError as error:
        raise click.BadParameter(str(error)) from None


def _error_kind(_: click.Context, __: click.Parameter, value: str | None) -> str | None:
    if value is not None and not ERROR_KIND_NAME.fullmatch(value):
        raise click.BadParameter(f"{value[:40]!r} is not an error kind (llm_error, ValueError)")
    return value


@click.command()
@click.option(
    "--status",
    type=click.Choice([status.value for status in TaskStatus]),
    default=None,
    help="Only the tasks in this state.",
)
@click.option("--queue", default=None, help="Only the tasks of this queue.")
@click.option("--parent", default=None, metavar="ID", help="Only the subtasks task ID launched.")
@click.option("--name", "job", default=None, metavar="JOB", help="Only the jobs of function JOB.")
@click.option(
    "--error",
    "error_kind",
    default=None,
    metavar="KIND",
    callback=_error_kind,
    help="Only the tasks that ended with this kind of error (ValueError, llm_error, cancelled).",
)
@click.option(
    "--search",
    default=None,
    metavar="TEXT",
    callback=_search,
    help="Only the tasks whose id, prompt, job name or error holds TEXT (any case).",
)
@click.option(
    "--since",
    default=None,
    metavar="WHEN",
    callback=_since,
    help="Only the tasks created since WHEN: a moment (ISO 8601) or a span back (15m, 2h, 3d).",
)
@click.option(
    "--columns",
    default=DEFAULT_COLUMNS,
    show_default=True,
    callback=_columns,
    help=f"The columns, in order, of: {', '.join(COLUMNS)}.",
)
@click.option(
    "--limit", type=click.IntRange(min=1), default=100, show_default=True, help="At most N tasks."
)
@click.option(
    "--cost",
    "with_cost",
    is_flag=True,
    help="Add a cost column: USD at the config's prices, subtasks included (reads each log).",
)
@click.option(
    "--sort",
    type=click.Choice(["created", "cost"]),
    default="created",
    show_default=True,
    help="The order: newest first, or the costliest first (unknown costs last).",
)
@click.option(
    "--group-by",
    "group_by",
    type=click.Choice(["error"]),
    default=None,
    help="With --status failed: every failure grouped by error kind, job (or agent) and "
    "queue, with counts and the first and last seen, as the web's failures page groups "
    "them (--limit N: the newest N only).",
)
@json_option
@config_option
@store_option
def tasks(
    status: str | None,
    queue: str | None,
    parent: str | None,
    job: str | None,
    error_kind: str | None,
    search: str | None,
    since: datetime | None,
    columns: list[str],
    limit: int,
    with_cost: bool,
    sort: str,
    group_by: str | None,
    as_json: bool,
    config: str | None,
    store: str | None,
) -> None:
    """List tasks, newest first (with --parent: that task's subtasks, in launch order)."""
    if group_by is not None:
        _check_grouping(status, parent, job, error_kind, since, search)
        from noeta.cli.failure_list import print_failure_groups

        if queue is not None:
            check_key("queue name", queue)
        source = click.get_current_context().get_parameter_source("limit")
        newest = limit if source is click.core.ParameterSource.COMMANDLINE else None
        print_failure_groups(store, queue, newest, as_json)
        return
    if (with_cost or sort == "cost") and "cost" not in columns:
        columns = [*columns, "cost"]
    prices = None
    if "cost" in columns:  # the config (and YAML) only for a list that shows costs
        from noeta.config import load_config

        prices = load_config(config).prices
    if parent is not None:
        check_key("task id", parent)
    if job is not None:
        check_key("job name", job)
    if queue is not None:
        check_key("queue name", queue)
    where = TaskFilter(job=job, error_kind=error_kind, created_since=since)
    if search is not None and parent is not None:
        raise click.UsageError("--search lists tasks from the store's search, not a parent's")
    found = asyncio.run(_listed(store, status, queue, parent, where, limit, search, prices))
    if sort == "cost":
        found.sort(key=_costliest_first)
    if as_json:
        click.echo(json.dumps([_json(listed) for listed in found], ensure_ascii=False, indent=2))
        return
    if not found:
        click.echo("no tasks")
        return
    now = datetime.now(UTC)
    rows = [columns] + [
        [str(scrubbed(COLUMNS[name](listed, now))) for name in columns] for listed in found
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(len(columns))]
    for row in rows:
        click.echo(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )


def _costliest_first(listed: Listed) -> tuple[bool, Decimal]:
    cost = listed.usage.cost if listed.usage is not None else None
    return (cost is None, -(cost or Decimal(0)))


def _check_grouping(status: str | None, *given: object) -> None:
    """--group-by error groups the failures, of --queue or all: nothing else narrows it."""
    if status not in (None, TaskStatus.FAILED.value):
        raise click.BadParameter(
            f"--group-by error groups failed tasks, not {status} ones: give --status failed"
        )
    if any(option is not None for option in given):
        raise click.UsageError(
            "--group-by error takes --queue only (not --parent, --name, --error, --since, --search)"
        )


def _json(listed: Listed) -> dict[str, Any]:
    document = task_json(listed.record) | waiting_json(listed.needs)
    if listed.usage is not None:
        from noeta.client.task_costs import usage_json

        document["usage"] = usage_json(listed.usage)
    summary = listed.summary
    if summary is None:
        return document
    at = {"started_at": summary.started_at, "finished_at": summary.finished_at}
    return (
        document
        | {
            "kind": summary.kind,
            "input": scrubbed(summary.input),
            "error": scrubbed(summary.error),
            "error_kind": summary.error_kind,
            "attempts": summary.attempts,
        }
        | {name: None if moment is None else moment.isoformat() for name, moment in at.items()}
    )


async def _listed(
    url: str | None,
    status: str | None,
    queue: str | None,
    parent: str | None,
    where: TaskFilter,
    limit: int,
    search: str | None = None,
    prices: Mapping[str, Price] | None = None,
) -> list[Listed]:
    """The tasks: a keyset page of the views at a time (each page's summaries in one
    statement); a parent's subtasks from its log, filtered here."""
    from noeta.client import AsyncClient

    async with AsyncClient(url, application_name="noeta-tasks", start_embedded=False) as client:
        store = await client.store()
        views = store.capabilities.views
        statuses = [] if status is None else [TaskStatus(status)]
        records: list[TaskRecord] = []
        summaries: dict[str, TaskSummary] = {}
        if parent is not None or views is None:
            records = await client.tasks(status=status, queue=queue, parent=parent, limit=limit)
            if views is not None:
                summaries = await views.task_summaries([r.id for r in records])
            records = [r for r in records if _kept(r, summaries.get(r.id), where)]
        else:
            if search is not None:
                await _index_search(views)
            cursor = None
            while len(records) < limit:
                asked = min(limit - len(records), MAX_PAGE)
                page = await views.task_page(
                    statuses=statuses,
                    queue=queue,
                    text=search,
                    before=cursor,
                    limit=asked,
                    where=where,
                )
                summaries |= await views.task_summaries([r.id for r in page])
                records += page
                if len(page) < asked:
                    break
                cursor = TaskCursor(page[-1].created_at, page[-1].id)
        needs: Mapping[str, tuple[str, ...]] = await unrunnable(store, records)
        usages: dict[str, TaskUsage] = {}
        if prices is not None:
            from noeta.client.task_costs import task_usage

            for record in records:
                usages[record.id] = await task_usage(store, record.id, prices)
        return [Listed(r, summaries.get(r.id), needs.get(r.id), usages.get(r.id)) for r in records]


async def _index_search(views: StoreViews) -> None:
    """Bring the search's index up to date, a few batches at most: past them (a big
    store's first search) the tasks it does not hold yet are read as written."""
    for _ in range(INDEX_STEPS):
        if await views.index_search():
            return


def _kept(record: TaskRecord, summary: TaskSummary | None, where: TaskFilter) -> bool:
    """Whether a subtask passes the filters the views would have applied."""
    if where.created_since is not None and record.created_at < where.created_since:
        return False
    if where.job is not None and (summary is None or summary.kind != where.job):
        return False
    return where.error_kind is None or (
        summary is not None and summary.error_kind == where.error_kind
    )
