"""A task's log as a timeline: one entry per event (turns, model calls with tokens and
latency, tool calls with their input and output folded, waits, messages, wake-ups,
children), a mark at every epoch change saying which worker took the task and what became
of the claim before, and one after the last event for a claim that wrote nothing. What
each step says is `noeta.log_steps` (the terminal's `show` says the same); this renders it
as HTML, a page (or a live batch) at a time."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from noeta.core.ports.store_views import LogEntry
from noeta.log_steps import Badge, Body, Line, Part, StepContext, epoch_change, step_of
from noeta.observability.span_record import SpanRecord
from noeta.web.render import clock_time, folded, h, link, url


@dataclass
class Context(StepContext):
    """What the entries after a point need from the events before it."""

    trace_id: str = ""
    # The "fork from here" form of a step (a seq in, HTML out); None: the rows carry none
    # (the live feed's, until the page is reloaded).
    fork_form: Callable[[int], str] | None = None


# The steps a fork usually starts from; the fork itself checks the boundary (ADR-0091).
FORKABLE = frozenset({"ModelReplied", "ToolFinished", "TurnEnded"})


def render(task_id: str, entries: list[LogEntry], context: Context) -> str:
    """The timeline items of `entries` (HTML), updating `context` as it reads them."""
    return "".join(_item(task_id, entry, context) for entry in entries)


def silent_claim(words: str) -> str:
    """The mark after the log's last event for a claim that wrote nothing (its words from
    `noeta.log_steps.claim_that_wrote_nothing`); none without words. live.js removes it
    when the claim's first event arrives."""
    return f'<li class="epoch silent" id="silent-claim">{h(words)}</li>' if words else ""


def _item(task_id: str, entry: LogEntry, context: Context) -> str:
    changed = epoch_change(entry, context)
    mark = f'<li class="epoch" data-epoch="{entry.epoch}">{h(changed)}</li>' if changed else ""
    raw = url(f"/tasks/{task_id}/events/{entry.seq}")
    data = entry.data if isinstance(entry.data, dict) else None
    if data is None:
        css, kind, body = "", entry.type, _unread(entry, raw)
        context.last_type = entry.type
    else:
        _trace(entry.type, data, context)
        step = step_of(entry, data, context)
        css, kind, body = step.css, step.title, "".join(_part(part, raw) for part in step.parts)
    meta = f"#{entry.seq} · {clock_time(entry.created_at)} · epoch {entry.epoch}"
    if context.fork_form is not None and entry.type in FORKABLE:
        body += context.fork_form(entry.seq)
    return (
        f'{mark}<li class="{css}" data-seq="{entry.seq}"><span class="raw">'
        f'{link(raw, "raw")}</span><span class="kind">{h(kind)}</span>'
        f'<span class="meta">{h(meta)}</span>{body}</li>'
    )


def _part(part: Part, raw: str) -> str:
    match part:
        case Body(text=text):
            return folded(text, raw=raw)
        case Badge(text=text):
            return f'<span class="badge recovered">{h(text)}</span>'
        case Line(before=before, task=task, after=after, muted=muted):
            named = link(url(f"/tasks/{task}"), task) if task else ""
            css = ' class="muted"' if muted else ""
            return f"<div{css}>{h(before)}{named}{h(after)}</div>"


def _unread(entry: LogEntry, raw: str) -> str:
    """An event too long to bring whole: its first characters and the way to the rest."""
    note = f"{entry.size:,} characters: too long to bring whole, its start:"
    return f'<div class="muted">{h(note)}</div>' + folded(entry.preview, raw=raw, size=entry.size)


def _trace(kind: str, data: dict[str, Any], context: Context) -> None:
    """The task's trace: from the first model or tool call that carries a span record."""
    if kind not in ("ModelCalled", "ToolStarted") or context.trace_id:
        return
    if isinstance(data.get("trace"), str):
        record = SpanRecord.parse(data["trace"])
        if record is not None:
            context.trace_id = f"{record.trace_id:032x}"
