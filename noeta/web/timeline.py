"""A task's log as a timeline: one entry per event (turns, model calls with tokens and
latency, tool calls with their input and output folded, waits, messages, wake-ups,
children), and a mark at every epoch change saying which worker took the task and what
became of the claim before. Rendered a page (or a live batch) at a time: what an entry
needs from earlier events travels in `Context`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from noeta.core.ports.store_views import LogEntry
from noeta.observability.span_record import SpanRecord
from noeta.web.render import clock_time, folded, h, json_text, link, url

# An epoch that ended on one of these handed the task back (a wait): the next claim
# resumed it. Any other last event: the claim ended mid-step (crash, lost lease, shutdown).
_HANDED_BACK = {"TurnEnded", "ToolWaiting", "SubtaskLaunched", "WakeupScheduled", "JobStarted"}
_RECOVERY = {
    "late": "recorded from the result its own run kept after its claim was gone",
    "recover": "settled by the tool's recover()",
    "rerun": "re-run (the tool is safe to retry)",
    "unknown": "outcome unknown: it may or may not have happened",
}


@dataclass
class Context:
    """What the entries after a point need from the events before it."""

    epoch: int = 0
    owner: str | None = None
    last_type: str = ""
    model_called: datetime | None = None
    model_request: str = ""  # the open ModelCalled's request hash
    last_request: str = ""  # the previous ModelCalled's, to tell a re-sent request
    tools_started: dict[str, datetime] = field(default_factory=dict)
    trace_id: str = ""
    # The "fork from here" form of a step (a seq in, HTML out); None: the rows carry none
    # (the live feed's, until the page is reloaded).
    fork_form: Callable[[int], str] | None = None


# The steps a fork usually starts from; the fork itself checks the boundary (ADR-0091).
FORKABLE = frozenset({"ModelReplied", "ToolFinished", "TurnEnded"})


def render(task_id: str, entries: list[LogEntry], context: Context) -> str:
    """The timeline items of `entries` (HTML), updating `context` as it reads them."""
    return "".join(_item(task_id, entry, context) for entry in entries)


def _item(task_id: str, entry: LogEntry, context: Context) -> str:
    mark = ""
    if entry.epoch and entry.epoch != context.epoch:
        mark = _epoch_mark(entry, context)
        context.epoch, context.owner = entry.epoch, entry.owner
    raw = url(f"/tasks/{task_id}/events/{entry.seq}")
    data = entry.data if isinstance(entry.data, dict) else None
    if data is None:
        css, kind, body = "", entry.type, _unread(entry, raw)
    else:
        css, kind, body = _describe(task_id, entry, data, context, raw)
    context.last_type = entry.type
    meta = f"#{entry.seq} · {clock_time(entry.created_at)} · epoch {entry.epoch}"
    if context.fork_form is not None and entry.type in FORKABLE:
        body += context.fork_form(entry.seq)
    return (
        f'{mark}<li class="{css}" data-seq="{entry.seq}"><span class="raw">'
        f'{link(raw, "raw")}</span><span class="kind">{h(kind)}</span>'
        f'<span class="meta">{h(meta)}</span>{body}</li>'
    )


def _epoch_mark(entry: LogEntry, context: Context) -> str:
    who = entry.owner or "?"
    if context.epoch == 0:
        text = f"epoch {entry.epoch}: claimed by {who}"
    elif context.last_type in _HANDED_BACK:
        text = (
            f"epoch {entry.epoch}: resumed by {who} (epoch {context.epoch} on "
            f"{context.owner} had handed the task back after {context.last_type})"
        )
    else:
        text = (
            f"epoch {entry.epoch}: taken over by {who}: epoch {context.epoch} on "
            f"{context.owner} ended mid-step after {context.last_type or 'its claim'} "
            "(a crash, a lost lease or a shutdown)"
        )
    return f'<li class="epoch" data-epoch="{entry.epoch}">{h(text)}</li>'


def _unread(entry: LogEntry, raw: str) -> str:
    """An event too long to bring whole: its first characters and the way to the rest."""
    note = f"{entry.size:,} characters: too long to bring whole, its start:"
    return f'<div class="muted">{h(note)}</div>' + folded(entry.preview, raw=raw, size=entry.size)


def _forked(data: dict[str, Any]) -> str:
    """A fork's TaskCreated: the task and seq it came from, and its workspace's source."""
    lines = ""
    source = data.get("forked_from")
    if isinstance(source, str) and source:
        at = h(data.get("forked_at"))
        lines += f"<div>forked from {link(url(f'/tasks/{source}'), source)} at seq {at}</div>"
    copied = data.get("workspace_from")
    if isinstance(copied, str) and copied:
        said = f"workspace: a copy of task {copied}, made when the fork first ran"
        lines += f"<div>{h(said)}</div>"
    return lines


def _describe(
    task_id: str, entry: LogEntry, data: dict[str, Any], context: Context, raw: str
) -> tuple[str, str, str]:
    kind = entry.type
    text = _field_text(raw)
    match kind:
        case "TaskCreated" if not data.get("model"):  # a job: its call follows
            said = f"job {', '.join(str(t) for t in data.get('tools') or [])}"
            return "", "created", f"<div>{h(said)}</div>" + _forked(data)
        case "TaskCreated":
            facts = f"model {data.get('model')}" + (
                " · interactive" if data.get("interactive") else ""
            )
            listed = data.get("tools", [])
            tools = (
                "its worker's plugins' (all)"
                if listed is None
                else ", ".join(str(t) for t in listed or []) or "none"
            )
            body = f"<div>{h(facts)} · tools: {h(tools)}</div>" + _forked(data)
            return "", "created", body + text(data.get("prompt") or "")
        case "PluginsPinned":
            pins = [pin for pin in data.get("pins") or [] if isinstance(pin, list)]
            said = ", ".join(" ".join(str(part) for part in pin[:3]) for pin in pins)
            return "", "plugins", f"<div>{h(said or 'none')}</div>"
        case "CallRequested":
            return "tool", f"job {data.get('name')}", text(json_text(data.get("input")))
        case "MessageTaken":
            return "wait", "message", text(data.get("text") or "")
        case "ModelCalled":
            return "model", "model call", _model_called(entry, data, context)
        case "ModelReplied":
            return "model", "model reply", _model_replied(entry, data, context, text)
        case "ModelFailed":
            context.model_called = None
            return (
                "error",
                "model failed",
                text(f"{data.get('error')} (after {data.get('attempts')} attempts)"),
            )
        case "ToolStarted":
            context.tools_started[str(data.get("call_id"))] = entry.created_at
            _trace(data, context)
            title = f"tool {data.get('name')} ({data.get('call_id')})"
            return "tool", title, text(json_text(data.get("input")))
        case "ToolFinished":
            return _tool_finished(entry, data, context, text)
        case "ToolResultCorrected":
            # Never a rewrite: the settled "unknown" stays above; this says what it was.
            badge = (
                '<span class="badge recovered">'
                + h(f"corrected: the result came late (epoch {data.get('from_epoch')})")
                + "</span>"
            )
            css = "error" if data.get("is_error") else "tool"
            title = f"tool result corrected ({data.get('call_id')})"
            return css, title, badge + text(str(data.get("content") or ""))
        case "ToolWaiting":
            question = f"asks: {data.get('question')}"
            return (
                "wait",
                f"gate on {data.get('name')} ({data.get('call_id')})",
                text(question) + text(json_text(data.get("input"))),
            )
        case "ToolAnswered":
            note = f" ({data.get('note')})" if data.get("note") else ""
            return (
                "wait",
                "answered",
                "<div>" + h(f"{data.get('call_id')}: {data.get('decision')}{note}") + "</div>",
            )
        case "SubtaskLaunched":
            child = str(data.get("child_id"))
            return (
                "wait",
                "subtask launched",
                f"<div>{link(url(f'/tasks/{child}'), child)} "
                + h(data.get("description") or "")
                + "</div>",
            )
        case "SubtaskOf":
            parent = str(data.get("parent"))
            return (
                "",
                "subtask of",
                f"<div>{link(url(f'/tasks/{parent}'), parent)} "
                + h(f"(depth {data.get('depth')})")
                + "</div>",
            )
        case "SubtaskReturned":
            child = str(data.get("child_id"))
            return (
                "wait",
                "subtask returned",
                f"<div>{link(url(f'/tasks/{child}'), child)} {h(data.get('status'))}</div>",
            )
        case "WakeupScheduled":
            return (
                "wait",
                "wake-up set",
                f"<div>{h(data.get('wakeup_id'))} due {h(data.get('due'))}</div>"
                + text(data.get("prompt") or ""),
            )
        case "WokenUp":
            return "wait", "woken up", f"<div>{h(data.get('wakeup_id'))}</div>"
        case "JobStarted":
            return "tool", f"background job {data.get('job_id')}", text(data.get("command") or "")
        case "JobFinished":
            return (
                "tool",
                f"background job {data.get('job_id')} exited {data.get('exit_code')}",
                text(data.get("output") or ""),
            )
        case "JobLost" | "JobStopped":
            return "error", f"{kind} {data.get('job_id')}", ""
        case "TurnEnded":
            css = "error" if data.get("outcome") == "failed" else ""
            return (
                css,
                f"turn ended: {data.get('outcome')}",
                text(data.get("answer") or data.get("error") or ""),
            )
        case "TaskFinished":
            css = "" if data.get("status") == "done" else "error"
            return (
                css,
                f"finished: {data.get('status')}",
                text(data.get("answer") or data.get("error") or ""),
            )
        case _:
            return "", kind, text(json_text({k: v for k, v in data.items() if k != "v"}))


def _field_text(raw: str) -> Any:
    def text(value: str) -> str:
        return folded(value, raw=raw) if value else ""

    return text


def _trace(data: dict[str, Any], context: Context) -> None:
    if not context.trace_id and isinstance(data.get("trace"), str):
        record = SpanRecord.parse(data["trace"])
        if record is not None:
            context.trace_id = f"{record.trace_id:032x}"


def _model_called(entry: LogEntry, data: dict[str, Any], context: Context) -> str:
    request = str(data.get("request_sha256") or "")
    resent = context.model_request == request or (
        context.model_called is None and context.last_request == request and request
    )
    context.model_called, context.model_request, context.last_request = (
        entry.created_at,
        request,
        request,
    )
    _trace(data, context)
    badge = '<span class="badge recovered">re-sent after a takeover: the same request bytes</span>'
    return (
        f'<div class="muted">request {h(request[:12])}</div>{badge if resent and request else ""}'
    )


def _model_replied(entry: LogEntry, data: dict[str, Any], context: Context, text: Any) -> str:
    given = data.get("usage")
    usage: dict[str, Any] = given if isinstance(given, dict) else {}
    facts = [f"stop {data.get('stop_reason')}"]
    facts.append(f"tokens in {usage.get('input_tokens', 0)} / out {usage.get('output_tokens', 0)}")
    if context.model_called is not None:
        seconds = (entry.created_at - context.model_called).total_seconds()
        facts.append(f"latency {seconds:.2f} s")
    context.model_called, context.model_request = None, ""
    parts = [f'<div class="muted">{h(" · ".join(facts))}</div>']
    for block in data.get("content") or []:
        if not isinstance(block, dict):
            continue
        if "text" in block and block.get("text"):
            parts.append(text(str(block["text"])))
        elif "name" in block:
            call = f"calls {block.get('name')} ({block.get('id')})"
            parts.append(f"<div>{h(call)}</div>{text(json_text(block.get('input')))}")
    return "".join(parts)


def _tool_finished(
    entry: LogEntry, data: dict[str, Any], context: Context, text: Any
) -> tuple[str, str, str]:
    call = str(data.get("call_id"))
    started = context.tools_started.pop(call, None)
    title = f"tool result ({call})"
    if started is not None:
        title += f" after {(entry.created_at - started).total_seconds():.2f} s"
    badges = ""
    recovery = str(data.get("recovery") or "")
    if recovery:
        how = _RECOVERY.get(recovery, recovery)
        if recovery == "late":
            how += f" (epoch {data.get('from_epoch')})"
        badges = f'<span class="badge recovered">recovered: {h(how)}</span>'
    css = "error" if data.get("is_error") else "tool"
    return css, title, badges + text(str(data.get("content") or ""))
