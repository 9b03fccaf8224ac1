"""A task's page: its row (state, owner, epoch, lease), what may be done to it (cancel,
a message, a gate's answer), and its log as a timeline a page at a time; and one event's
raw JSON, in parts when it is large."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response

from noeta.client.task_costs import summary_lines
from noeta.core.errors import UnknownTask
from noeta.core.ports.store import TaskRecord, TaskStatus
from noeta.core.ports.store_views import LogEntry
from noeta.core.ports.worker_registry import no_worker_offers
from noeta.core.rules import canvas
from noeta.core.task_loading import load_state, snapshot_version
from noeta.log_steps import json_text
from noeta.silent_claims import silent_claim_words
from noeta.web import timeline
from noeta.web.render import form, h, link, page, scrubbed, status_badge, url, utc
from noeta.web.site import PageError, Site, not_found, session_of, whole_number

LOG_PAGE_EVENTS = 200
# What the page brings of one event whole; longer ones come as a preview and a raw link.
INLINE_CHARS = 64 * 1024
RAW_PART_CHARS = 1 << 20  # one part of a large event's raw text
USAGE_MAX_EVENTS = 20_000  # the longest log whose usage a page view sums


async def task_page(site: Site, request: Request) -> HTMLResponse:
    task_id = request.path_params["task_id"]
    record = await _record(site, task_id)
    after = _int(request.query_params.get("after"), "after", default=None)
    if after is None:  # the newest page: where a running task's news arrives
        after = max(0, record.last_seq - LOG_PAGE_EVENTS)
    views = await site.views()
    head = await views.log_page(task_id, after_seq=0, limit=20, inline_chars=INLINE_CHARS)
    context = timeline.Context()
    if after > 0:  # the event before the page sets its epoch, owner and open calls
        for seen in await views.log_page(task_id, after_seq=after - 1, limit=1):
            timeline.render(task_id, [seen], context)
    context.fork_form = _fork_form(site, session_of(request), task_id)
    entries = await views.log_page(
        task_id, after_seq=after, limit=LOG_PAGE_EVENTS, inline_chars=INLINE_CHARS
    )
    items = timeline.render(task_id, entries, context)
    if last_page := not entries or entries[-1].seq >= record.last_seq:
        words = await silent_claim_words(await site.store(), record, context.epoch)
        items += timeline.silent_claim(words)
    if not context.trace_id:
        context.trace_id = _trace_id(task_id, head)
    last = entries[-1].seq if entries else after
    live = ""
    if not record.status.finished and last_page:
        live = f' data-live="{h(url(f"/tasks/{task_id}/live", after=last))}"'
    body = _kind(head) + facts(record) + await _waiting_for(site, record)
    body += await _usage(site, record)
    body += _links(site, record, context.trace_id, await views.has_subtasks(task_id))
    body += await _actions(site, session_of(request), record, head)
    body += _pager(task_id, after, last, record.last_seq)
    body += f'<h2>log</h2><ol class="timeline" id="timeline">{items}</ol>'
    body += _pager(task_id, after, last, record.last_seq)
    body += await _late_results(site, task_id)
    return HTMLResponse(page(f"Task {task_id}", body, live=live))


async def _record(site: Site, task_id: str) -> TaskRecord:
    try:
        return await site.reader.get(task_id)
    except UnknownTask:
        raise not_found(f"task with the id {task_id!r}") from None


def _fork_form(site: Site, session: str, task_id: str) -> Callable[[int], str]:
    """A step's "fork from here": a new task from the log through that step, optionally
    with a message (ADR-0091); one token serves every step's form."""
    path = f"/tasks/{task_id}/fork"
    token = site.csrf.issue(session, path)

    def fork_form(seq: int) -> str:
        fields = (
            f'<input type="hidden" name="at" value="{seq}">'
            '<input name="message" placeholder="message (optional)" size="24">'
            '<label title="its files as they are now; files are not versioned by the log">'
            '<input type="checkbox" name="workspace" value="copy"> copy its files</label>'
        )
        return form(url(path), token, fields, "fork from here", css="fork")

    return fork_form


def _int(text: str | None, what: str, *, default: int | None) -> int | None:
    if text is None or text == "":
        return default
    number = whole_number(text)
    if number is None:
        raise PageError(400, f"{what} must be a whole number of 0 or more, not {text!r}")
    return number


def _trace_id(task_id: str, head: list[LogEntry]) -> str:
    context = timeline.Context()
    timeline.render(task_id, head, context)
    return context.trace_id


def facts(record: TaskRecord) -> str:
    """The task's row as the page shows it (replaced whole by the live feed)."""
    shown = [
        ("status", status_badge(record.status.value)),
        ("queue", h(record.queue)),
        ("owner", h(record.owner or "-")),
        ("epoch", h(record.owner_epoch)),
        ("lease until", h(utc(record.lease_until))),
        ("due", h(utc(record.ready_at))),
        ("events", h(record.last_seq)),
        ("created", h(utc(record.created_at))),
        ("updated", h(utc(record.updated_at))),
    ]
    cells = "".join(f"<dt>{h(name)}</dt><dd>{value}</dd>" for name, value in shown)
    return f'<dl class="facts" id="task-facts" data-status="{h(record.status.value)}">{cells}</dl>'


async def _usage(site: Site, record: TaskRecord) -> str:
    """What the task cost, its subtasks included, as `noeta show` says it: summed from
    the whole log, so not for a log longer than a page view should read."""
    if record.last_seq > USAGE_MAX_EVENTS:
        said = f"usage is not summed on this page for {record.last_seq:,} events"
        return f'<p class="muted">{h(said)}; `noeta show {h(record.id)}` sums it</p>'
    usage = await site.reader.usage(record.id)
    if not usage.costs:
        return ""
    total, *models = summary_lines(usage)
    items = "".join(f"<li>{h(line.strip())}</li>" for line in models)
    return f'<div class="usage" id="task-usage"><p>{h(total)}</p><ul>{items}</ul></div>'


async def _waiting_for(site: Site, record: TaskRecord) -> str:
    """What a ready or waiting task needs that no live worker offers (ADR-0092)."""
    registry = (await site.store()).capabilities.workers
    if registry is None or record.status not in (TaskStatus.READY, TaskStatus.WAITING):
        return ""
    needs = (await registry.unrunnable([record.id])).get(record.id)
    return "" if needs is None else f'<p class="waiting">{h(no_worker_offers(needs))}</p>'


def _kind(head: list[LogEntry]) -> str:
    """What the task is: a job (its function and arguments) or an agent (its model)."""
    created = head[0].data if head and head[0].type == "TaskCreated" else None
    if not isinstance(created, dict):
        return ""
    if created.get("model"):
        return f'<p class="kind">agent task on model {h(created["model"])}</p>'
    requested = next((e.data for e in head if e.type == "CanvasRequested"), None)
    spec = requested.get("spec") if isinstance(requested, dict) else None
    if isinstance(spec, dict):
        tree = spec.get("tree")  # ADR-0104: its members are its subtasks
        shown = canvas.outline(tree) if isinstance(tree, dict) else "?"
        return f'<p class="kind">canvas of jobs · <code>{h(shown)}</code></p>'
    call = next((e.data for e in head if e.type == "CallRequested"), None)
    if not isinstance(call, dict):
        return '<p class="kind">job</p>'
    arguments = json_text(call.get("input"))
    shown = arguments if len(arguments) <= 200 else arguments[:200] + "…"
    return f'<p class="kind">job {h(call.get("name"))} · arguments <code>{h(shown)}</code></p>'


def _links(site: Site, record: TaskRecord, trace_id: str, has_subtasks: bool) -> str:
    found = [link(url("/tasks", parent=record.id), "subtasks")] if has_subtasks else []
    if site.jaeger_url and trace_id:
        where = f"{site.jaeger_url.rstrip('/')}/trace/{trace_id}"
        found.append(link(where, f"trace {trace_id} in Jaeger"))
    elif trace_id:
        found.append(h(f"trace {trace_id}"))
    return f'<p class="links">{" · ".join(found)}</p>' if found else ""


async def _actions(site: Site, session: str, record: TaskRecord, head: list[LogEntry]) -> str:
    if record.status.finished:
        return ""
    base = f"/tasks/{record.id}"

    def action(name: str, fields: str, button: str, css: str = "") -> str:
        path = f"{base}/{name}"  # the token names the decoded path, as the POST sees it
        return form(url(path), site.csrf.issue(session, path), fields, button, css=css)

    parts = [action("cancel", "", "cancel task", css="danger")]
    created = head[0].data if head and head[0].type == "TaskCreated" else None
    if isinstance(created, dict) and created.get("interactive"):
        fields = (
            f'<input type="hidden" name="key" value="{uuid.uuid4().hex}">'
            '<textarea name="text" rows="2" cols="50" placeholder="a message"></textarea>'
        )
        parts.append(action("send", fields, "send"))
    if record.status is TaskStatus.WAITING:
        state = await load_state(await site.store(), record.id, snapshot_version())
        if state.waiting_call:
            fields = (
                f'<input type="hidden" name="call" value="{h(state.waiting_call)}">'
                f"<span>gate on call {h(state.waiting_call)}:</span>"
                '<select name="decision"><option>allow</option><option>deny</option></select>'
                '<input name="note" placeholder="note (optional)">'
            )
            parts.append(action("answer", fields, "answer"))
    return f'<div class="actions" id="task-actions">{"".join(parts)}</div>'


def _pager(task_id: str, after: int, last: int, newest: int) -> str:
    if after == 0 and last >= newest:
        return ""
    base = f"/tasks/{task_id}"
    links = []
    if after > 0:
        links.append(link(url(base, after=0), "first"))
        links.append(link(url(base, after=max(0, after - LOG_PAGE_EVENTS)), "earlier"))
    if last < newest:
        links.append(link(url(base, after=last), "later"))
        links.append(link(url(base), "newest"))
    shown = f"events {after + 1} to {last} of {newest}"
    return f'<div class="pager"><span class="muted">{h(shown)}</span>{" ".join(links)}</div>'


async def _late_results(site: Site, task_id: str) -> str:
    kept = await (await site.store()).late_results(task_id)
    if not kept:
        return ""
    items = []
    for kept_result in kept:
        kind = "error" if kept_result.is_error else "result"
        said = (
            f"{kept_result.call_id}: {kind} from epoch {kept_result.epoch} on {kept_result.worker}"
        )
        items.append(f"<li>{h(said)}<pre>{h(kept_result.content[:2000])}</pre></li>")
    note = (
        "tool results and model replies that came after their claim was gone"
        " (a hint; the log is the truth)"
    )
    return f'<h2>late results</h2><p class="muted">{h(note)}</p><ul>{"".join(items)}</ul>'


async def event_raw(site: Site, request: Request) -> Response:
    """One event's JSON: whole (indented) up to a part's size, else one part of its text."""
    task_id = request.path_params["task_id"]
    seq = _int(request.path_params["seq"], "the event number", default=0) or 0
    part = _int(request.query_params.get("part"), "part", default=None)
    views = await site.views()
    offset = (part or 0) * RAW_PART_CHARS
    found = await views.event_text(task_id, seq, offset=offset, length=RAW_PART_CHARS)
    if found is None:
        await _record(site, task_id)
        raise not_found(f"event #{seq} in task {task_id!r}")
    text, total = found
    headers = {"X-Content-Type-Options": "nosniff"}
    if total <= RAW_PART_CHARS:
        pretty = json.dumps(json.loads(text), ensure_ascii=False, indent=2)
        return PlainTextResponse(scrubbed(pretty), headers=headers)
    if part is not None:
        if offset >= total:
            raise not_found(f"part {part} of event #{seq} (it has {-(-total // RAW_PART_CHARS)})")
        return PlainTextResponse(scrubbed(text), headers=headers)
    parts = -(-total // RAW_PART_CHARS)
    raw = f"/tasks/{task_id}/events/{seq}"
    links = []
    for n in range(parts):
        start, end = n * RAW_PART_CHARS, min(total, (n + 1) * RAW_PART_CHARS)
        links.append(
            f"<li>{link(url(raw, part=n), f'part {n + 1}: characters {start:,} to {end:,}')}</li>"
        )
    about = f"event #{seq} is {total:,} characters of JSON text, served in {parts} parts"
    back = link(url(f"/tasks/{task_id}"), "back to the task")
    body = f"<p>{h(about)}</p><ol>{''.join(links)}</ol><p>{back}</p>"
    return HTMLResponse(page(f"Task {task_id}, event #{seq}", body))
