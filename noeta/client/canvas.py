"""Celery's canvas for plain jobs (ADR-0104): signatures (`fn.s(...)`), `chain`, `group`,
`chord`, and the canvas task's first events, every member checked before anything is
written (an unknown job or bad arguments named by the member's call id, `m<i>`)."""

from __future__ import annotations

import importlib
import inspect
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from noeta.client.handles import TaskHandle
from noeta.core.errors import ConfigError, NoetaError, PayloadError
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.store import NewEvent, NewTask, check_key
from noeta.core.rules import events, subtasks
from noeta.core.rules.canvas import MAX_MEMBERS, MAX_NESTING, member_call_id
from noeta.plugins.function_tools import FunctionTool, install_signature
from noeta.plugins.loading import module_pin

if TYPE_CHECKING:
    from noeta.config import Config


class CanvasRefused(ConfigError):
    """A canvas that cannot run as given: nothing of it was written."""


@dataclass(frozen=True, slots=True)
class Signature:
    """One call of a job as a canvas member (Celery's `fn.s(...)`). In a chain, or as a
    chord's callback, it receives the previous result as its first argument unless it is
    immutable (`fn.si(...)`). A value: the same signature in two places is two members."""

    job: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    immutable: bool = False
    ignore_errors: bool = False
    queue: str = ""

    def set(self, *, ignore_errors: bool | None = None, queue: str | None = None) -> Signature:
        """This signature with options: `ignore_errors` (its failure becomes the result
        {"error": ...} instead of failing the canvas), the `queue` its job runs in."""
        return replace(
            self,
            ignore_errors=self.ignore_errors if ignore_errors is None else ignore_errors,
            queue=self.queue if queue is None else queue,
        )

    def delay(self, *args: Any, **kwargs: Any) -> TaskHandle:
        """Run this one call as a plain job (what Celery's signature.delay does)."""
        client = _celery_calls().default_client()
        handle: TaskHandle = client.enqueue(self.job, _bound(self, (*self.args, *args), kwargs))
        return handle


@dataclass(frozen=True, slots=True)
class _Composite:
    members: tuple[Any, ...]
    ignore_errors: bool = False

    def set(self, *, ignore_errors: bool) -> Any:
        return replace(self, ignore_errors=ignore_errors)

    def delay(self) -> TaskHandle:
        """Submit the canvas through the process's default Client; `get()` waits for it."""
        return self.apply_async()

    def apply_async(self, *, queue: str | None = None, id: str | None = None) -> TaskHandle:
        client = _celery_calls().default_client()
        handle: TaskHandle = client.canvas(self, queue=queue, id=id)
        return handle


@dataclass(frozen=True, slots=True)
class Chain(_Composite):
    """Members one after another, each given the previous one's result; its result is
    the last member's."""


@dataclass(frozen=True, slots=True)
class Group(_Composite):
    """Members at once; its result is the list of theirs, in the members' order."""


@dataclass(frozen=True, slots=True)
class Chord(_Composite):
    """A group (the header) whose results, as a list, go to one callback (the body),
    run once; the chord's result is the callback's."""


Canvas = Signature | Chain | Group | Chord


def chain(*members: Canvas) -> Chain:
    return Chain(tuple(members))


def group(*members: Canvas | Iterable[Canvas]) -> Group:
    """`group(a.s(1), a.s(2))`, or `group(a.s(n) for n in ...)` as Celery accepts."""
    if len(members) == 1 and not isinstance(members[0], Signature | _Composite):
        return Group(tuple(members[0]))
    return Group(tuple(members))


def chord(header: Group | Iterable[Canvas], body: Canvas) -> Chord:
    return Chord((header if isinstance(header, Group) else group(header), body))


def signature(
    job: str, args: Iterable[Any] = (), kwargs: Mapping[str, Any] | None = None
) -> Signature:
    """A signature by the job's name (checked when the canvas is submitted)."""
    return Signature(job, tuple(args), dict(kwargs or {}))


def canvas_task(canvas: Canvas, task_id: str, queue: str, config: str | Config | None) -> NewTask:
    """The canvas task's first events (TaskCreated, CanvasRequested), every member checked
    first: CanvasRefused (or the member's own error) names the member, nothing written."""
    check_key("queue name", queue)
    spec = _Spec(config)
    tree = spec.node(canvas, receives=False, nesting=0)
    if spec.count == 0:
        raise CanvasRefused("a canvas needs at least one job")
    try:
        subtasks.child_id(task_id, member_call_id(spec.count - 1), 1)
    except ValueError as error:
        raise CanvasRefused(str(error)) from None
    created = events.TaskCreated(model="", tools=())
    # The queue its members run in unless a signature names one: read from the spec, a
    # launch costs no round trip for the canvas's row.
    requested = events.CanvasRequested({"jobs": spec.pins, "tree": tree, "queue": queue})
    log = [NewEvent(*events.encode(event)) for event in (created, requested)]
    return NewTask(task_id, log, queue=queue)


class _Spec:
    """The tree as CanvasRequested stores it, built leaf by leaf in call-id order."""

    def __init__(self, config: str | Config | None) -> None:
        self.config, self.count = config, 0
        self.pins: dict[str, JSONValue] = {}

    def node(self, node: Canvas, *, receives: bool, nesting: int) -> dict[str, JSONValue]:
        if nesting > MAX_NESTING:
            raise CanvasRefused(f"the canvas nests deeper than {MAX_NESTING} levels")
        if isinstance(node, Signature):
            return self._leaf(node, receives)
        if not isinstance(node, _Composite):
            raise CanvasRefused(f"a canvas member must be a signature (fn.s(...)), not {node!r}")
        kind = type(node).__name__.lower()
        if not node.members:
            raise CanvasRefused(f"a {kind} needs at least one member (this one has none)")
        members: list[JSONValue] = []
        for at, member in enumerate(node.members):
            # Celery's rule: in a chain (a chord's body too) each member after the first
            # receives the previous result; a group's members each receive what it does.
            later = at > 0 and not isinstance(node, Group)
            members.append(self.node(member, receives=receives or later, nesting=nesting + 1))
        built: dict[str, JSONValue] = {kind: members}
        if node.ignore_errors:
            built["ignore_errors"] = True
        return built

    def _leaf(self, sig: Signature, receives: bool) -> dict[str, JSONValue]:
        from noeta.client.job_tasks import configured_job_tool, job_input

        call_id = member_call_id(self.count)
        self.count += 1
        if self.count > MAX_MEMBERS:
            raise CanvasRefused(f"a canvas has at most {MAX_MEMBERS} jobs")
        try:
            tool = configured_job_tool(sig.job, self.config)
            if sig.queue:
                check_key("queue name", sig.queue)
            receiving = receives and not sig.immutable
            name = _first_parameter(tool) if receiving else ""
            bound = _bound(sig, sig.args, {}, tool, name)
            input = _json(tool, bound) if name else job_input(tool, bound)
        except (NoetaError, TypeError) as error:
            raise CanvasRefused(f"canvas member {call_id} ({sig.job}): {error}") from None
        self.pins[tool.name] = list(module_pin(tool.module).as_tuple())
        leaf: dict[str, JSONValue] = {"job": tool.name, "input": input, "receives": name}
        if sig.queue:
            leaf["queue"] = sig.queue
        if sig.ignore_errors:
            leaf["ignore_errors"] = True
        return leaf


def _first_parameter(tool: FunctionTool) -> str:
    """The parameter a received result fills: the function's first (after `ctx`)."""
    for parameter in inspect.signature(tool.function).parameters.values():
        if parameter.name != "ctx":
            return parameter.name
    raise TypeError(f"{tool.name}() takes no argument, so it cannot receive a result: use .si()")


def _bound(
    sig: Signature,
    args: tuple[Any, ...],
    extra: Mapping[str, Any],
    tool: FunctionTool | None = None,
    receiving: str = "",
) -> dict[str, Any]:
    """The input from the signature's arguments, as a call would bind them; `receiving`:
    the first parameter, left for the previous result."""
    from noeta.client.job_tasks import job_tool

    call_input = _celery_calls().call_input

    tool = tool or job_tool(sig.job)
    kwargs = {**sig.kwargs, **extra}
    if not receiving:
        whole: dict[str, Any] = call_input(tool, args, kwargs)
        return whole
    placeholder = object()
    bound = call_input(tool, (placeholder, *args), kwargs)
    return {name: value for name, value in bound.items() if value is not placeholder}


def _json(tool: FunctionTool, input: dict[str, Any]) -> dict[str, JSONValue]:
    """An input still missing its received result: checked as JSON only (the schema,
    whole, is checked by the job's own run)."""
    try:
        checked: dict[str, JSONValue] = json.loads(json.dumps(input, allow_nan=False))
    except (TypeError, ValueError) as error:
        raise PayloadError(f"the input of job {tool.name!r} is not JSON: {error}") from None
    return checked


install_signature(Signature)  # what `fn.s()` and `fn.si()` make


def _celery_calls() -> Any:
    """noeta.client.celery_calls, imported by name when a call needs it: it imports the
    clients, which import this module (the canvas calls), so a plain import would make a
    cycle (tests/test_import_graph.py)."""
    return importlib.import_module("noeta.client.celery_calls")
