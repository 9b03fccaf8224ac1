"""The tasks page: filters (status, queue, parent, an indexed text search, job name, error
kind, since), capped counts per status and queue, the bulk actions that fit the filter,
and the list a keyset page at a time (fast at a million rows), each row's kind, input,
error, runtime and attempts read for the whole page in one statement."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import HTMLResponse

from noeta.core.errors import UnknownTask
from noeta.core.ports.store import TaskRecord, TaskStatus
from noeta.core.ports.store_views import (
    COUNT_CAP,
    StatusCount,
    TaskCursor,
    TaskFilter,
    TaskSummary,
)
from noeta.task_columns import runtime, shown_error_kind
from noeta.web import bulk_pages
from noeta.web.cost_pages import listed_cost
from noeta.web.list_filters import checked, error_kind_of, since_of, status_of, text_of
from noeta.web.render import h, link, page, status_badge, table, url, utc
from noeta.web.search_index import BUILDING_NOTE
from noeta.web.site import PageError, Site

PAGE_ROWS = 50


async def tasks_page(site: Site, request: Request) -> HTMLResponse:
    query = request.query_params
    status = status_of(query.get("status") or None)
    queue = checked("queue", query.get("queue") or None)
    parent = checked("parent", query.get("parent") or None)
    text = text_of(query.get("text") or query.get("q") or None)
    name = checked("job name", query.get("name") or None)
    error = error_kind_of(query.get("error") or None)
    since = query.get("since") or None
    where = TaskFilter(job=name, error_kind=error, created_since=since_of(since))
    before = _cursor(query.get("before") or None)
    views = await site.views()
    statuses = [status] if status else []
    # The index is filled by writing: on the primary, whatever store the page reads.
    indexing = text is not None and parent is None
    indexed = not indexing or await site.search_index.before_search(await site.views(primary=True))
    if parent is not None:
        try:
            records = await site.reader.tasks(status=status, queue=queue, parent=parent, limit=1000)
        except UnknownTask:
            raise PageError(404, f"there is no task {parent!r} to list the subtasks of") from None
        more = None
    else:
        records = await views.task_page(
            statuses=statuses,
            queue=queue,
            text=text,
            before=before,
            limit=PAGE_ROWS + 1,
            where=where,
        )
        more = records[PAGE_ROWS - 1] if len(records) > PAGE_ROWS else None
        records = records[:PAGE_ROWS]
    summaries = await views.task_summaries([record.id for record in records])
    counts = await views.task_counts(COUNT_CAP)
    shown = {"name": name, "error": error, "since": since}
    body = _filters(status, queue, parent, text, shown)
    # The bulk actions act on this list's filter whole (not on a parent's subtasks), and
    # sit right under it.
    if parent is None:
        body += await bulk_pages.buttons(site, status, queue, text, where)
    body += _counts(counts)
    if not indexed:
        body += f'<p class="muted notice">{h(BUILDING_NOTE)}</p>'
    if records:
        body += await listed_cost(site, [record.id for record in records])
    body += _list(records, summaries) if records else '<p class="muted">no task matches</p>'
    if more is not None:
        cursor = f"{more.created_at.isoformat()}~{more.id}"
        filters = {"status": status, "queue": queue, "text": text, **shown}
        next_page = url("/tasks", **filters, before=cursor)
        body += f'<div class="pager">{link(next_page, "older tasks →")}</div>'
    title = f"Subtasks of {parent}" if parent else "Tasks"
    return HTMLResponse(page(title, body))


def _cursor(text: str | None) -> TaskCursor | None:
    if text is None:
        return None
    moment, tilde, task_id = text.partition("~")
    try:
        at = datetime.fromisoformat(moment)
    except ValueError:
        at = None
    if not tilde or at is None or at.utcoffset() is None:
        raise PageError(400, "the page cursor is damaged: start again from the first page")
    return TaskCursor(at, task_id)


def _filters(
    status: TaskStatus | None,
    queue: str | None,
    parent: str | None,
    text: str | None,
    shown: dict[str, str | None],
) -> str:
    options = '<option value="">any</option>' + "".join(
        f'<option value="{s.value}"{" selected" if s is status else ""}>{s.value}</option>'
        for s in TaskStatus
    )
    return (
        '<form class="filters" method="get" action="/tasks">'
        f'<label>status<select name="status">{options}</select></label>'
        f'<label>queue<input name="queue" value="{h(queue or "")}" size="12"></label>'
        f'<label>parent<input name="parent" value="{h(parent or "")}" size="14"></label>'
        "<label>text (id, prompt, job or error)"
        f'<input name="text" value="{h(text or "")}" size="20"></label>'
        f'<label>job<input name="name" value="{h(shown["name"] or "")}" size="12"></label>'
        f'<label>error<input name="error" value="{h(shown["error"] or "")}" size="12"></label>'
        f'<label>since<input name="since" value="{h(shown["since"] or "")}" size="10"></label>'
        '<button type="submit">filter</button> <a href="/tasks">clear</a></form>'
    )


def _counts(counts: list[StatusCount]) -> str:
    queues = sorted({count.queue for count in counts})
    if not queues:
        return ""
    cells: dict[TaskStatus, dict[str, int]] = defaultdict(dict)
    capped = {count.status for count in counts if count.capped}
    for count in counts:
        cells[count.status][count.queue] = count.count
    rows = []
    for status in TaskStatus:
        if status not in cells:
            continue
        plus = "+" if status in capped else ""
        total = sum(cells[status].values())
        row = [link(url("/tasks", status=status.value), status.value), h(f"{total:,}{plus}")]
        for queue in queues:
            n = cells[status].get(queue)
            label = f"≥{n:,}" if n and plus else f"{n:,}" if n else ""
            row.append(link(url("/tasks", status=status.value, queue=queue), label) if n else "")
        rows.append(row)
    note = (
        f'<p class="muted">each status is counted up to {COUNT_CAP:,} tasks</p>' if capped else ""
    )
    return table(["status", "all", *queues], rows, css="counts") + note


def _list(records: list[TaskRecord], summaries: dict[str, TaskSummary]) -> str:
    now = datetime.now(UTC)
    rows = []
    for record in records:
        summary = summaries.get(record.id)
        kind = shown_error_kind(summary)
        status = status_badge(record.status.value)
        if kind:
            status += f' <span class="muted" title="{h(summary.error if summary else "")}">'
            status += f"{h(kind)}</span>"
        rows.append(
            [
                link(url(f"/tasks/{record.id}"), record.id),
                h(summary.kind if summary else ""),
                status,
                h(record.queue),
                h(summary.attempts if summary else ""),
                h(runtime(summary, now)),
                h(utc(record.created_at)),
                h(utc(summary.finished_at if summary else None)),
                f'<span class="muted">{h(summary.input if summary else "")}</span>',
            ]
        )
    headings = ["id", "kind", "status", "queue", "attempts", "runtime", "created", "finished"]
    return table([*headings, "input"], rows, css="tasks")
