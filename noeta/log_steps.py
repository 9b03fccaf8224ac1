"""A task's log as the steps a person reads (a model call with its tokens and latency, a
tool call with its input and result, waits, takeovers, failures): what the web timeline
and `noeta show`/`tail` both say, each rendering it its own way (HTML, terminal text)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from noeta.core.rules import canvas, events
from noeta.core.rules.task_spend import budget_question

# An epoch that ended on one of these handed the task back (a wait): the next claim
# resumed it. Any other last event: the claim ended mid-step (crash, lost lease, shutdown).
_HANDED_BACK = {"TurnEnded", "ToolWaiting", "SubtaskLaunched", "WakeupScheduled", "JobStarted"}
_RECOVERY = {
    "late": "recorded from the result its own run kept after its claim was gone",
    "recover": "settled by the tool's recover()",
    "rerun": "re-run (the tool is safe to retry)",
    "unknown": "outcome unknown: it may or may not have happened",
}
_CUT_CAUSES = {
    "worker_lost": "its worker was gone",
    "call": "the call itself was cut",
    "not_sent": "the request never left",
}


class LoggedEvent(Protocol):
    """What a step is read from: a log page's entry or a stored event."""

    @property
    def seq(self) -> int: ...
    @property
    def type(self) -> str: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def epoch(self) -> int: ...
    @property
    def owner(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Line:
    """A line of words; `task` (a task's id, linked on a page) sits between the two texts."""

    before: str
    task: str = ""
    after: str = ""
    muted: bool = False


@dataclass(frozen=True, slots=True)
class Body:
    """A value shown whole when short, folded when long (a prompt, a tool's output)."""

    text: str


@dataclass(frozen=True, slots=True)
class Badge:
    """A mark on the step: how a call was recovered or corrected."""

    text: str


Part = Line | Body | Badge


@dataclass(frozen=True, slots=True)
class Step:
    """One event as a step: `css` its look ("model", "tool", "wait", "error" or "")."""

    css: str
    title: str
    parts: tuple[Part, ...] = ()


@dataclass
class StepContext:
    """What the steps after a point need from the events before it."""

    epoch: int = 0
    owner: str | None = None
    last_type: str = ""
    model_called: datetime | None = None
    model_request: str = ""  # the open ModelCalled's request hash
    last_request: str = ""  # the previous ModelCalled's, to tell a re-sent request
    tools_started: dict[str, datetime] = field(default_factory=dict)


def json_text(value: object) -> str:
    """A JSON value as people read it: non-ASCII as itself, on one line when it is short."""
    if isinstance(value, str):
        return value
    compact = json.dumps(value, ensure_ascii=False)
    return compact if len(compact) <= 120 else json.dumps(value, ensure_ascii=False, indent=1)


def epoch_change(event: LoggedEvent, context: StepContext) -> str:
    """The words for a new claim at `event` ("" if its epoch is the one before); moves
    `context` to it."""
    if not event.epoch or event.epoch == context.epoch:
        return ""
    who = event.owner or "?"
    silent = _silent_between(context.epoch, event.epoch)
    if context.epoch == 0:
        text = f"epoch {event.epoch}: claimed by {who}"
    elif context.last_type in _HANDED_BACK:
        text = (
            f"epoch {event.epoch}: resumed by {who} (epoch {context.epoch} on "
            f"{context.owner} had handed the task back after {context.last_type})"
        )
    else:
        text = (
            f"epoch {event.epoch}: taken over by {who}: epoch {context.epoch} on "
            f"{context.owner} ended mid-step after {context.last_type or 'its claim'} "
            "(a crash, a lost lease or a shutdown)"
        )
    context.epoch, context.owner = event.epoch, event.owner
    return text + silent


def _silent_between(before: int, now: int) -> str:
    """The claims between two epochs of the log: each took the task and wrote nothing
    (a worker that lacked a plugin the task pinned, or stopped, or lost its lease first).
    The store keeps only the latest claim's holder, so theirs are not known."""
    first = max(before, 0) + 1
    if now - first < 1:
        return ""
    said = f"epoch {first}" if now - first == 1 else f"epochs {first} to {now - 1}"
    return f" ({said} claimed the task before and wrote nothing; the holder is not kept)"


# Why a claim hands its task back having written nothing (the worker's log line says which).
_HANDED_BACK_WHY = "(it lacked a plugin the task pinned, or was shutting down)"


@dataclass(frozen=True, slots=True)
class LatestClaim:
    """The task row's claim (the latest), and what the workers registry says of its worker
    (`worker_state` live, dead or stopped, None if it is not listed)."""

    status: str
    owner: str | None
    epoch: int
    lease_until: datetime | None
    updated_at: datetime
    worker_state: str | None = None
    worker_seen: datetime | None = None


def claim_that_wrote_nothing(claim: LatestClaim, logged_epoch: int, now: datetime) -> str:
    """The words for the latest claim when the log holds nothing of it ("" otherwise):
    which worker holds or held the task, until when, and why it let go if that is known.
    It claimed after the log's last event; the moment itself is not kept."""
    if claim.owner is None or claim.epoch <= logged_epoch:
        return ""
    who = f"epoch {claim.epoch}: claimed by {claim.owner} after the last event"
    worker = _worker_words(claim) + _silent_between(logged_epoch, claim.epoch)
    lease = claim.lease_until
    if claim.status in ("running", "holding") and lease is not None and lease > now:
        held = f"it holds the task, lease until {_at(lease)}, and has written nothing yet"
        return f"{who}; {held}{worker}"
    if lease is not None and lease <= now:
        return f"{who}; it wrote nothing and its lease lapsed at {_at(lease)}{worker}"
    why = "as it stopped" if claim.worker_state == "stopped" else _HANDED_BACK_WHY
    back = f"it wrote nothing and handed the task back at {_at(claim.updated_at)} {why}"
    return f"{who}; {back}{worker}"


def _worker_words(claim: LatestClaim) -> str:
    match claim.worker_state:
        case None:
            return f"; {claim.owner} is not in the workers registry"
        case "dead":
            seen = f" since {_at(claim.worker_seen)}" if claim.worker_seen else ""
            return f"; its worker is dead (silent{seen})"
        case "stopped":
            return "; its worker has stopped"
        case _:
            return "; its worker is live"


def _at(moment: datetime | None) -> str:
    return "-" if moment is None else moment.astimezone(UTC).strftime("%H:%M:%S UTC")


def attempt_words(data: Any) -> str:
    """A job's failed attempt as a person reads it ("" for data not of that form)."""
    try:
        said = f"attempt {int(data['attempt'])} failed after {float(data['seconds']):.2f}s"
        after = f"next at {data['retry_at']}" if data.get("retry_at") else "no attempt left"
        return f"{said}: {data['error']}; {after}"
    except (KeyError, TypeError, ValueError):
        return ""


def step_of(event: LoggedEvent, data: dict[str, Any], context: StepContext) -> Step:
    """The step `event` (its decoded `data`) is, updating `context` as it reads it."""
    step = _describe(event, data, context)
    context.last_type = event.type
    return step


def _body(value: object) -> tuple[Part, ...]:
    text = value if isinstance(value, str) else json_text(value)
    return (Body(text),) if text else ()


def _describe(event: LoggedEvent, data: dict[str, Any], context: StepContext) -> Step:
    kind = event.type
    match kind:
        case "TaskCreated":
            return Step("", "created", _created(data))
        case "PluginsPinned":
            pins = [pin for pin in data.get("pins") or [] if isinstance(pin, list)]
            said = ", ".join(" ".join(str(part) for part in pin[:3]) for pin in pins)
            return Step("", "plugins", (Line(said or "none"),))
        case "CallRequested":
            return Step("tool", f"job {data.get('name')}", _body(json_text(data.get("input"))))
        case "MessageTaken":
            return Step("wait", "message", _body(data.get("text") or ""))
        case "ModelCalled":
            return Step("model", "model call", _model_called(event, data, context))
        case "ModelReplied":
            return Step("model", "model reply", _model_replied(event, data, context))
        case "ModelFailed":
            context.model_called = None
            said = f"{data.get('error')} (after {data.get('attempts')} attempts)"
            return Step("error", "model failed", _body(said))
        case "ModelCallCut":
            context.model_called = None
            cause = _CUT_CAUSES.get(str(data.get("cause")), str(data.get("cause")))
            said = f"the call of epoch {data.get('epoch')} got no reply: {cause}"
            return Step("error", "model call cut", (Line(said),))
        case "ToolStarted":
            context.tools_started[str(data.get("call_id"))] = event.created_at
            title = f"tool {data.get('name')} ({data.get('call_id')})"
            return Step("tool", title, _body(json_text(data.get("input"))))
        case "ToolFinished":
            return _tool_finished(event, data, context)
        case "AttemptFailed":
            said = attempt_words(data) or json_text(_fields(data))
            return Step("error", f"attempt failed ({data.get('call_id')})", _body(said))
        case "ToolResultCorrected":
            # Never a rewrite: the settled "unknown" stays above; this says what it was.
            badge = Badge(f"corrected: the result came late (epoch {data.get('from_epoch')})")
            css = "error" if data.get("is_error") else "tool"
            title = f"tool result corrected ({data.get('call_id')})"
            return Step(css, title, (badge, *_body(str(data.get("content") or ""))))
        case _:
            return _flow_step(kind, data)


def _flow_step(kind: str, data: dict[str, Any]) -> Step:
    """The steps that wait, branch or end: gates, subtasks, wake-ups, jobs, turns."""
    match kind:
        case "ToolWaiting":
            question = f"asks: {data.get('question')}"
            title = f"gate on {data.get('name')} ({data.get('call_id')})"
            return Step("wait", title, _body(question) + _body(json_text(data.get("input"))))
        case "ToolAnswered":
            note = f" ({data.get('note')})" if data.get("note") else ""
            answer = f"{data.get('call_id')}: {data.get('decision')}{note}"
            return Step("wait", "answered", (Line(answer),))
        case "SubtaskLaunched":
            named = Line("", str(data.get("child_id")), " " + str(data.get("description") or ""))
            return Step("wait", "subtask launched", (named,))
        case "SubtaskOf":
            named = Line("", str(data.get("parent")), f" (depth {data.get('depth')})")
            return Step("", "subtask of", (named,))
        case "SubtaskReturned":
            named = Line("", str(data.get("child_id")), f" {data.get('status')}")
            return Step("wait", "subtask returned", (named, *_body(data.get("report") or "")))
        case "CanvasRequested":  # ADR-0104
            spec = data.get("spec")
            tree = spec.get("tree") if isinstance(spec, dict) else None
            said = canvas.outline(tree) if isinstance(tree, dict) else "?"
            return Step("", "canvas", (Line(said),))
        case "WakeupScheduled":
            named = Line(f"{data.get('wakeup_id')} due {data.get('due')}")
            return Step("wait", "wake-up set", (named, *_body(data.get("prompt") or "")))
        case "WokenUp":
            return Step("wait", "woken up", (Line(str(data.get("wakeup_id"))),))
        case "JobStarted":
            title = f"background job {data.get('job_id')}"
            return Step("tool", title, _body(data.get("command") or ""))
        case "JobFinished":
            title = f"background job {data.get('job_id')} exited {data.get('exit_code')}"
            return Step("tool", title, _body(data.get("output") or ""))
        case "JobLost" | "JobStopped":
            return Step("error", f"{kind} {data.get('job_id')}")
        case "BudgetExceeded":
            return Step("error", "budget exceeded: call not sent", (Line(_budget_words(data)),))
        case "TurnEnded":
            css = "error" if data.get("outcome") == "failed" else ""
            said = data.get("answer") or data.get("error") or ""
            return Step(css, f"turn ended: {data.get('outcome')}", _body(said))
        case "TaskFinished":
            css = "" if data.get("status") == "done" else "error"
            said = data.get("answer") or data.get("error") or ""
            return Step(css, f"finished: {data.get('status')}", _body(said))
        case _:
            return Step("", kind, _body(json_text(_fields(data))))


def _budget_words(data: dict[str, Any]) -> str:
    """The refusal as its question says it (the budget, the spend, the estimate)."""
    try:
        refused = events.decode("BudgetExceeded", data)
    except ValueError:
        refused = None
    if isinstance(refused, events.BudgetExceeded):
        return budget_question(refused)
    return json_text(_fields(data))


def _fields(data: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in data.items() if key != "v"}


def _created(data: dict[str, Any]) -> tuple[Part, ...]:
    listed = data.get("tools", [])
    if not data.get("model"):  # a job: no model; its one call (CallRequested) follows
        named = ", ".join(str(t) for t in listed or [])
        parts: list[Part] = [Line(f"job {named}" if named else "a canvas of jobs")]
    else:
        facts = f"model {data.get('model')}" + (" · interactive" if data.get("interactive") else "")
        tools = (
            "its worker's plugins' (all)"
            if listed is None
            else ", ".join(str(t) for t in listed or []) or "none"
        )
        parts = [Line(f"{facts} · tools: {tools}")]
    # A fork's TaskCreated: the task and seq it came from, and its workspace's source.
    source = data.get("forked_from")
    if isinstance(source, str) and source:
        parts.append(Line("forked from ", source, f" at seq {data.get('forked_at')}"))
    copied = data.get("workspace_from")
    if isinstance(copied, str) and copied:
        parts.append(Line(f"workspace: a copy of task {copied}, made when the fork first ran"))
    return (*parts, *_body(data.get("prompt") or ""))


def _model_called(
    event: LoggedEvent, data: dict[str, Any], context: StepContext
) -> tuple[Part, ...]:
    request = str(data.get("request_sha256") or "")
    resent = context.model_request == request or (
        context.model_called is None and context.last_request == request and request
    )
    context.model_called = event.created_at
    context.model_request = context.last_request = request
    said: tuple[Part, ...] = (Line(f"request {request[:12]}", muted=True),)
    if resent and request:
        said += (Badge("re-sent after a takeover: the same request bytes"),)
    return said


def _model_replied(
    event: LoggedEvent, data: dict[str, Any], context: StepContext
) -> tuple[Part, ...]:
    given = data.get("usage")
    facts = [f"stop {data.get('stop_reason')}"]
    if isinstance(given, dict):
        usage: dict[str, Any] = given
        facts.append(
            f"tokens in {usage.get('input_tokens', 0)} / out {usage.get('output_tokens', 0)}"
        )
    else:  # the provider said no usage: unknown, never shown as 0
        facts.append("tokens unknown (no usage in the reply)")
    if context.model_called is not None:
        seconds = (event.created_at - context.model_called).total_seconds()
        facts.append(f"latency {seconds:.2f} s")
    context.model_called, context.model_request = None, ""
    parts: list[Part] = [Line(" · ".join(facts), muted=True)]
    for block in data.get("content") or []:
        if not isinstance(block, dict):
            continue
        if "text" in block and block.get("text"):
            parts.append(Body(str(block["text"])))
        elif "name" in block:
            parts.append(Line(f"calls {block.get('name')} ({block.get('id')})"))
            parts.extend(_body(json_text(block.get("input"))))
    return tuple(parts)


def _tool_finished(event: LoggedEvent, data: dict[str, Any], context: StepContext) -> Step:
    call = str(data.get("call_id"))
    started = context.tools_started.pop(call, None)
    title = f"tool result ({call})"
    if started is not None:
        title += f" after {(event.created_at - started).total_seconds():.2f} s"
    badges: tuple[Part, ...] = ()
    recovery = str(data.get("recovery") or "")
    if recovery:
        how = _RECOVERY.get(recovery, recovery)
        if recovery == "late":
            how += f" (epoch {data.get('from_epoch')})"
        badges = (Badge(f"recovered: {how}"),)
    css = "error" if data.get("is_error") else "tool"
    return Step(css, title, badges + _body(str(data.get("content") or "")))
