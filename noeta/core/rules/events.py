"""The events of a task's log: one frozen dataclass each, and their versioned encoding.

An event is stored as its class name (the store's event type) and a JSON object holding
`"v"` (its encoding version) and its fields. An event type, or a version, that this code
does not know was written by a newer noeta: `decode` returns `UnknownEvent`, and the
worker leaves the task to a newer worker instead of guessing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from noeta.core.ports.model import Text, ToolCall, Usage
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.pin import Pin
from noeta.core.rules.event_json import FROM_JSON, to_json

ENCODING_VERSION = 1
# A TaskCreated whose tools are its worker's (tools null) is version 2, so a noeta that
# predates it leaves the task to a newer one instead of running it with no tools.
WORKER_TOOLS_VERSION = 2
# A TaskCreated that starts in a copy of another task's workspace is version 3, so a noeta
# that predates the copy leaves the fork to a newer one instead of running it on no files.
WORKSPACE_COPY_VERSION = 3
# A ModelReplied whose usage is unknown (the provider sent none: null) or holds reasoning
# tokens is version 2: a noeta that predates them cannot read that usage (ADR-0097 kind 2).
USAGE_VERSION = 2
# A TaskCreated with a budget is version 4, so a noeta that predates budgets leaves the
# task to a newer one instead of running it unbounded.
BUDGET_VERSION = 4

CutCause = Literal["worker_lost", "call", "not_sent"]
TurnOutcome = Literal["answered", "no_answer", "failed"]
FinishStatus = Literal["done", "failed", "cancelled"]


@dataclass(frozen=True, slots=True)
class TaskCreated:
    """The task's configuration; a one-shot task's prompt opens its first turn."""

    model: str  # a model spec: "anthropic:<model>", "openai:<model>", "scripted:<file>"
    prompt: str = ""
    interactive: bool = False
    system: str = ""
    max_tokens: int = 4096
    # The tools the model may call; None: every tool of the plugins its worker pins
    # (what `submit` gives a task without tools of its own, starting no plugin to ask).
    tools: tuple[str, ...] | None = ()
    # A fork's source: the task and the seq its log was copied through (ADR-0091); "" and
    # 0 otherwise, and then not stored (a TaskCreated without a fork encodes as before).
    forked_from: str = ""
    forked_at: int = 0
    # The task whose workspace this one starts in a copy of (a fork's `--workspace copy`,
    # ADR-0096), made by the worker that first runs it; "" (not stored): a fresh one.
    workspace_from: str = ""
    # The task's budget (`--max-tokens`, `--max-cost` in USD as a decimal string), checked
    # before each model call; 0 and "" (not stored): none. `on_budget`: "fail" or "ask".
    budget_tokens: int = 0
    budget_cost: str = ""
    on_budget: str = ""

    @property
    def has_budget(self) -> bool:
        return bool(self.budget_tokens or self.budget_cost)

    def tool_names(self, worker_tools: Iterable[str]) -> tuple[str, ...]:
        """The tools the task may call, on a worker that has `worker_tools` (in order)."""
        return tuple(worker_tools) if self.tools is None else self.tools


@dataclass(frozen=True, slots=True)
class CallRequested:
    """The task is a plain job: this one tool call, run under the tool recovery contract,
    and its result is the task's (the log's second event, written with its creation).
    A new event type, so a noeta that predates jobs leaves the task to a newer one."""

    call_id: str
    name: str
    input: dict[str, JSONValue]
    # The failed or cancelled job this one runs again (`noeta retry`); a record only, so
    # a noeta that predates it may drop it and run the job all the same.
    retry_of: str = ""


@dataclass(frozen=True, slots=True)
class MessageTaken:
    """A message taken from the inbox; the append that records it marks the entry taken."""

    inbox_id: int
    text: str


@dataclass(frozen=True, slots=True)
class ModelCalled:
    """Appended before the request is sent; `request_sha256` identifies the exact bytes."""

    request_sha256: str
    trace: str = ""  # the call's span record (noeta.observability.span_record); "" untraced
    # The request's input tokens as estimated before it was sent (model_limits'
    # estimate_tokens): what a request whose reply never came may have been billed for.
    # 0 (not stored) in logs written before it.
    input_estimate: int = 0


@dataclass(frozen=True, slots=True)
class ModelCallCut:
    """Why the open ModelCalled got no reply, recorded by the claimer that finds it (ADR-0080):
    "worker_lost" (its worker held no live claim: it died, froze or lost the store),
    "call" (its worker lived on, only this call was cut), "not_sent" (the worker kept word
    that the request never left). Only "call" counts towards the model's cap."""

    epoch: int  # the claim that wrote the ModelCalled
    cause: CutCause


@dataclass(frozen=True, slots=True)
class ModelReplied:
    content: tuple[Text | ToolCall, ...]
    stop_reason: str  # noeta's StopReason
    usage: Usage | None = field(default_factory=Usage)  # None: the provider sent none
    provider_stop_reason: str = ""
    response_id: str = ""


@dataclass(frozen=True, slots=True)
class ModelFailed:
    """The provider kept failing (or refused for good): closes the open ModelCalled."""

    error: str
    attempts: int


@dataclass(frozen=True, slots=True)
class BudgetExceeded:
    """A model call the task's budget did not allow, not sent: `budget` is "tokens" or
    "cost" (the task's own), or "fleet" (a fleet budget: `fleet` names it, ADR-0110);
    `spent` what was spent (tokens, or USD: the log's for the task's own budget, the
    period's for a fleet one), `estimate` the refused request's estimated input tokens,
    `limit` the budget. A new type: an older noeta leaves the task."""

    budget: str
    spent: str
    estimate: int
    limit: str
    fleet: str = ""  # `research/acme --per-day`: the fleet budget's queue[/key] and period


@dataclass(frozen=True, slots=True)
class ToolStarted:
    """Appended before the tool runs, with the call as actually executed."""

    call_id: str
    name: str
    input: dict[str, JSONValue]
    trace: str = ""  # the call's span record (noeta.observability.span_record); "" untraced


@dataclass(frozen=True, slots=True)
class ToolFinished:
    call_id: str
    content: str
    is_error: bool = False
    # How a half-done call was settled: "late" (the result its own run kept when its
    # claim was gone, ADR-040), "recover", "rerun", "unknown"; "" it was not half done.
    recovery: str = ""
    # With "late": the epoch whose claim ran the call. 0 otherwise, and in logs written
    # before the field existed (a field with a default: old logs decode unchanged).
    from_epoch: int = 0


@dataclass(frozen=True, slots=True)
class AttemptFailed:
    """An attempt of a plain job's call raised `error` after `seconds` (the worker's own
    measure). With `retry_at` (UTC, ISO 8601, store clock) the call is run again then and
    the task waits in the queue meanwhile, its slot free; "" means no attempt is left and
    the call's ToolFinished lands with this. A new type: older workers leave the task."""

    call_id: str
    attempt: int  # 1-based, counted from the log's ToolStarted events of the call
    error: str
    seconds: float
    retry_at: str = ""


@dataclass(frozen=True, slots=True)
class ToolResultCorrected:
    """A call settled "outcome unknown" did finish: its result, kept by the worker of epoch
    `from_epoch` after the call was settled, recorded by a later claimer (ADR-0083). The
    settled result stays in the log; the model is told of this one with its next request."""

    call_id: str
    content: str
    is_error: bool
    from_epoch: int


@dataclass(frozen=True, slots=True)
class ToolWaiting:
    """A gate asked a person about this call: it waits, not half done, for the answer."""

    call_id: str
    name: str
    input: dict[str, JSONValue]  # as it will run if allowed (after any rewrite)
    question: str


@dataclass(frozen=True, slots=True)
class ToolAnswered:
    """The answer, taken from the inbox in the same append."""

    call_id: str
    decision: Literal["allow", "deny"]
    note: str = ""
    inbox_id: int = 0


@dataclass(frozen=True, slots=True)
class PluginsPinned:
    """The plugins this task runs with; each pin is stored as its four strings."""

    pins: tuple[Pin, ...]


@dataclass(frozen=True, slots=True)
class JobStarted:
    """A background job, recorded with the call that started it, before it runs."""

    job_id: str
    command: str


@dataclass(frozen=True, slots=True)
class JobFinished:
    """A job's result, taken from the inbox; it opens a turn, like a message."""

    job_id: str
    exit_code: int | None
    output: str
    inbox_id: int


@dataclass(frozen=True, slots=True)
class JobLost:
    """The worker running a job lost the task; the model is told, once."""

    job_id: str


@dataclass(frozen=True, slots=True)
class JobStopped:
    """The task ended (cancelled, or failed) while a job of its ran: the job is stopped
    with the claim, and recorded so with the end, before it; no turn is opened."""

    job_id: str


@dataclass(frozen=True, slots=True)
class WakeupScheduled:
    """The model asked to be woken at `due` (UTC, ISO 8601, store clock) with `prompt`;
    recorded with the ScheduleWakeup call's result. Its id is that call's id."""

    wakeup_id: str
    due: str
    prompt: str


@dataclass(frozen=True, slots=True)
class WokenUp:
    """A wake-up fell due and opens a turn with its prompt: appended once, under the claim."""

    wakeup_id: str


@dataclass(frozen=True, slots=True)
class SubtaskOf:
    """A subtask's second event, written with its creation: whose `Agent` call made it."""

    parent: str
    call_id: str
    depth: int  # 1 for a child of a top-level task
    trace: str = ""  # the parent's Agent call span record: the child's trace links to it


@dataclass(frozen=True, slots=True)
class SubtaskLaunched:
    """The `Agent` call's wait: appended with the child's creation, in one append. The
    call's result comes later, with the child's handback."""

    call_id: str
    child_id: str
    description: str = ""


@dataclass(frozen=True, slots=True)
class SubtaskReturned:
    """A child's handback, taken from the inbox in the same append; while the call still
    waits for it, its ToolFinished (the report) rides in that append too."""

    child_id: str
    status: str  # the child's final status: "done", "failed", "cancelled"
    inbox_id: int
    report: str = ""  # a canvas member's result or error, the canvas's to fold (ADR-0104)
    # What the child's tree spent, for a budget it drew on (ADR-0107): its tokens of
    # every kind, and its cost in USD ("unknown" where a model had no price); 0 and ""
    # (not stored): a child with no budget, which reports none.
    tokens: int = 0
    cost: str = ""


@dataclass(frozen=True, slots=True)
class CanvasRequested:
    """The task is a canvas of jobs (chain, group, chord; ADR-0104): its members run as
    its subtasks, their results fold here. A new event type: an older noeta leaves it."""

    spec: dict[str, JSONValue]  # noeta.core.rules.canvas's tree and the jobs' pins


@dataclass(frozen=True, slots=True)
class PluginRecord:
    """A record a plugin wrote in a hook, appended with the events it belongs to; the
    plugin's latest record is its state (e.g. its progress mark), `TaskView.mark`."""

    plugin: str
    data: JSONValue


@dataclass(frozen=True, slots=True)
class TurnEnded:
    outcome: TurnOutcome
    answer: str = ""
    error: str = ""  # "llm_error: …", "llm_truncated: …", "internal_error: …"


@dataclass(frozen=True, slots=True)
class TaskFinished:
    status: FinishStatus
    answer: str = ""
    error: str = ""


@dataclass(frozen=True, slots=True)
class UnknownEvent:
    """An event this version cannot decode: written by a newer noeta."""

    type: str
    version: int


Event = (
    TaskCreated
    | CallRequested
    | MessageTaken
    | ModelCalled
    | ModelCallCut
    | ModelReplied
    | ModelFailed
    | BudgetExceeded
    | ToolStarted
    | ToolFinished
    | AttemptFailed
    | ToolResultCorrected
    | ToolWaiting
    | ToolAnswered
    | PluginsPinned
    | JobStarted
    | JobFinished
    | JobLost
    | JobStopped
    | WakeupScheduled
    | WokenUp
    | SubtaskOf
    | SubtaskLaunched
    | SubtaskReturned
    | CanvasRequested
    | PluginRecord
    | TurnEnded
    | TaskFinished
)

EVENT_TYPES: dict[str, type[Event]] = {cls.__name__: cls for cls in get_args(Event)}


def encode(event: Event) -> tuple[str, dict[str, JSONValue]]:
    """The store's (type, data) for an event."""
    data: dict[str, JSONValue] = {"v": _version_of(event)}
    optional = _STORED_ONLY_WHEN_SET.get(type(event))
    for name in _FIELD_NAMES[type(event)]:
        value = getattr(event, name)
        if optional is not None and name in optional and value == optional[name]:
            continue  # a field added later, at its default: stored as before it existed
        data[name] = to_json(value)
    return type(event).__name__, data


# Each event class's field names, in order: an append encodes every event it writes, and
# `dataclasses.fields` builds its answer anew on every call.
_FIELD_NAMES = {cls: tuple(f.name for f in dataclasses.fields(cls)) for cls in EVENT_TYPES.values()}


def decode(event_type: str, data: JSONValue) -> Event | UnknownEvent:
    """The event for a stored (type, data); `UnknownEvent` if a newer noeta wrote it.

    Raises ValueError for data that is malformed for a type this version knows.
    """
    if not isinstance(data, dict):
        raise ValueError(f"{event_type} data is not an object")
    version = data.get("v")
    if not isinstance(version, int):
        raise ValueError(f"{event_type} data has no encoding version")
    decoding = _DECODING.get(event_type)
    if decoding is None or version > _NEWEST_VERSION.get(decoding[0], ENCODING_VERSION):
        return UnknownEvent(event_type, version)
    cls, fields = decoding
    try:
        values: dict[str, Any] = {}
        for name, convert in fields:
            if name in data:
                values[name] = data[name] if convert is None else convert(data[name])
        return cls(**values)
    except (KeyError, TypeError) as error:
        raise ValueError(f"{event_type} data is malformed: {error}") from None


# Fields added after logs existed, stored only when set: every log without them encodes
# byte for byte as before (the golden logs), and an older noeta ignores them.
# Per class, each such field and the default at which it is left out.
_STORED_ONLY_WHEN_SET: dict[type, dict[str, object]] = {
    TaskCreated: {
        "forked_from": "",
        "forked_at": 0,
        "workspace_from": "",
        "budget_tokens": 0,
        "budget_cost": "",
        "on_budget": "",
    },
    CallRequested: {"retry_of": ""},
    ModelCalled: {"input_estimate": 0},
    BudgetExceeded: {"fleet": ""},
    SubtaskReturned: {"report": "", "tokens": 0, "cost": ""},
}

# The newest encoding of the types that have more than one.
_NEWEST_VERSION: dict[type, int] = {
    TaskCreated: BUDGET_VERSION,
    ModelReplied: USAGE_VERSION,
}


def _version_of(event: Event) -> int:
    if isinstance(event, TaskCreated) and (event.has_budget or event.on_budget):
        return BUDGET_VERSION
    if isinstance(event, TaskCreated) and event.workspace_from:
        return WORKSPACE_COPY_VERSION
    if isinstance(event, TaskCreated) and event.tools is None:
        return WORKER_TOOLS_VERSION
    if isinstance(event, ModelReplied) and (event.usage is None or event.usage.reasoning_tokens):
        return USAGE_VERSION
    return ENCODING_VERSION


# The converters of event_json, keyed by class.
_FROM_JSON = {(EVENT_TYPES[cls], name): convert for (cls, name), convert in FROM_JSON.items()}
# What `decode` needs of a stored type, in one lookup: its class, and each field with its
# converter (None: the stored JSON is the value). A claim decodes every event it reads: a
# job's four in 6.5 µs instead of 8.2 with a lookup per field. (The newest encoding is
# still read from `_NEWEST_VERSION` at each decode: a test plays an older noeta with it.)
_DECODING: dict[str, tuple[type[Event], tuple[tuple[str, Callable[[Any], Any] | None], ...]]]
_DECODING = {
    type_name: (cls, tuple((name, _FROM_JSON.get((cls, name))) for name in _FIELD_NAMES[cls]))
    for type_name, cls in EVENT_TYPES.items()
}
