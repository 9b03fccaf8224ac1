"""A canvas of jobs (chain, group, chord; ADR-0104): its tree, and the pure rule that says
what its task does next from its folded state: launch members, wait for them, or finish.

The tree is `CanvasRequested.spec`: {"jobs": {name: pin}, "tree": node, "queue": the
canvas's queue, its members' unless a leaf names one}, a node being a
leaf {"job", "input", "receives", "queue", "ignore_errors"}, {"chain": [...]},
{"group": [...]} or {"chord": [header group, body]}. Leaves are numbered in tree order;
leaf i runs as the subtask of call id `m<i>`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from noeta.core.ports.payload import JSONValue
from noeta.core.rules.task_state import TaskState

# Members launched in one append: a group of 10,000 is written in batches of this many.
LAUNCH_BATCH = 500
# A canvas's bounds, checked when it is made: its members, and how deep its tree nests.
# Nesting is data in one task's log, not tasks that launch tasks, so the subtask depth
# limit (which stops a model recursing) does not apply to it.
MAX_MEMBERS = 100_000
MAX_NESTING = 32
MEMBER_CALL_PREFIX = "m"


@dataclass(frozen=True, slots=True)
class MemberLaunch:
    """One leaf to start: its call id (`m<i>`), job, input (with the result it receives)."""

    call_id: str
    job: str
    input: dict[str, JSONValue]
    queue: str


@dataclass(frozen=True, slots=True)
class LaunchMembers:
    """Members whose turn has come and that are not launched yet: create them as subtasks.
    `more`: others are due after these (a batch of a big group); without them, once these
    are launched the canvas waits (nothing else is due until an end comes in)."""

    members: tuple[MemberLaunch, ...]
    more: bool = False


@dataclass(frozen=True, slots=True)
class AwaitMembers:
    """Every member due is launched: take their ends from the inbox, or wait for one."""


@dataclass(frozen=True, slots=True)
class CanvasEnded:
    status: str  # "done", "failed"
    answer: str = ""  # the canvas's result, as JSON text (as a job's answer is)
    error: str = ""


CanvasStep = LaunchMembers | AwaitMembers | CanvasEnded


@dataclass(frozen=True, slots=True)
class _Report:
    """A member's result as its end reported it, read only where it is passed on (the next
    link's input, the canvas's answer): a walk goes past every ended member at each step
    of the canvas, and decoding each there made a chain's step linear in its length."""

    text: str

    def value(self) -> JSONValue:
        try:
            decoded: JSONValue = json.loads(self.text)
        except ValueError:
            return self.text
        return decoded


@dataclass(frozen=True, slots=True)
class _Results:
    """A group's results in order, each read only where the group's result is passed on."""

    values: tuple[_Value, ...]


_Value = JSONValue | _Report | _Results


def _read(value: _Value) -> JSONValue:
    """A walk's value as the JSON it stands for."""
    if isinstance(value, _Report):
        return value.value()
    if isinstance(value, _Results):
        return [_read(each) for each in value.values]
    return value


@dataclass(frozen=True, slots=True)
class _Done:
    value: _Value


@dataclass(frozen=True, slots=True)
class _Failed:
    error: str


@dataclass(frozen=True, slots=True)
class _Pending:
    launches: tuple[MemberLaunch, ...]


_Outcome = _Done | _Failed | _Pending
_NOTHING: JSONValue = {"noeta": "no result passed"}  # a marker: compared by identity


def next_step(state: TaskState) -> CanvasStep:
    """What the canvas task does next: pure, from the tree and its members' ends."""
    spec = state.canvas or {}
    ended = {call: (status, report) for call, status, report in state.canvas_results}
    running = {call for call, _, _ in state.subtasks}
    walk = _Walk(ended, running)
    tree = spec.get("tree")
    outcome = walk.node(tree if isinstance(tree, dict) else {}, _NOTHING)
    match outcome:
        case _Done(value=value):
            return CanvasEnded("done", answer=json.dumps(_read(value)))
        case _Failed(error=error):
            return CanvasEnded("failed", error=error)
        case _Pending(launches=launches) if launches:
            return LaunchMembers(launches[:LAUNCH_BATCH], more=len(launches) > LAUNCH_BATCH)
    return AwaitMembers()


def member_call_id(index: int) -> str:
    return f"{MEMBER_CALL_PREFIX}{index}"


def leaves(node: Mapping[str, JSONValue]) -> Iterator[Mapping[str, JSONValue]]:
    """The tree's leaves in their order (the order of their call ids)."""
    for child in _members(node):
        yield from leaves(child)
    if "job" in node:
        yield node


def outline(node: Mapping[str, JSONValue], limit: int = 200) -> str:
    """The tree in a line, as a person reads it: `chord(group(add x5), tsum)`."""
    text = _outline(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _outline(node: Mapping[str, JSONValue]) -> str:
    if "job" in node:
        return str(node["job"])
    runs: list[list[object]] = []  # [member, how many times in a row]
    for member in map(_outline, _members(node)):
        if runs and runs[-1][0] == member:
            runs[-1][1] = int(str(runs[-1][1])) + 1
        else:
            runs.append([member, 1])
    said = ", ".join(f"{text} x{count}" if count != 1 else str(text) for text, count in runs)
    kind = next((kind for kind in ("chain", "group", "chord") if kind in node), "canvas")
    return f"{kind}({said})"


class _Walk:
    """One evaluation of the tree: each leaf's outcome from its end, if it came back."""

    def __init__(self, ended: dict[str, tuple[str, str]], running: set[str]) -> None:
        self.ended, self.running, self.index = ended, running, 0

    def node(self, node: Mapping[str, JSONValue], given: _Value) -> _Outcome:
        if "job" in node:
            outcome = self._leaf(node, given)
        elif "group" in node:
            outcome = self._group(_members(node), given)
        else:  # a chain; a chord is a chain of its header group and its body (Celery's)
            outcome = self._chain(_members(node), given)
        if isinstance(outcome, _Failed) and node.get("ignore_errors") is True:
            return _Done({"error": outcome.error})
        return outcome

    def _leaf(self, node: Mapping[str, JSONValue], given: _Value) -> _Outcome:
        call_id = member_call_id(self.index)
        self.index += 1
        job = node.get("job")
        if call_id in self.ended:
            status, report = self.ended[call_id]
            if status != "done":
                return _Failed(f"member {call_id} ({job}) {status}: {report or 'no reason given'}")
            return _Done(_Report(report))
        if call_id in self.running:
            return _Pending(())
        raw = node.get("input")
        input = dict(raw) if isinstance(raw, dict) else {}
        receives = node.get("receives")
        if isinstance(receives, str) and receives and given is not _NOTHING:
            input[receives] = _read(given)  # Celery's rule: the previous result, first argument
        queue = str(node.get("queue") or "")
        return _Pending((MemberLaunch(call_id, str(job), input, queue),))

    def _chain(self, members: list[Mapping[str, JSONValue]], given: _Value) -> _Outcome:
        value = given
        for at, member in enumerate(members):
            outcome = self.node(member, value)
            if not isinstance(outcome, _Done):
                self.index += sum(_count(rest) for rest in members[at + 1 :])
                return outcome
            value = outcome.value
        return _Done(value)

    def _group(self, members: list[Mapping[str, JSONValue]], given: _Value) -> _Outcome:
        outcomes = [self.node(member, given) for member in members]
        failed = next((o for o in outcomes if isinstance(o, _Failed)), None)
        if failed is not None:
            return failed  # the first failed member (in order) fails the group now
        if all(isinstance(o, _Done) for o in outcomes):
            return _Done(_Results(tuple(o.value for o in outcomes if isinstance(o, _Done))))
        return _Pending(tuple(m for o in outcomes if isinstance(o, _Pending) for m in o.launches))


def _members(node: Mapping[str, JSONValue]) -> list[Mapping[str, JSONValue]]:
    for kind in ("chain", "group", "chord"):
        members = node.get(kind)
        if isinstance(members, list):
            return [member for member in members if isinstance(member, dict)]
    return []


def member_count(spec: Mapping[str, JSONValue]) -> int:
    """The jobs of a canvas's tree (its spec's), walked once."""
    tree = spec.get("tree")
    return _count(tree) if isinstance(tree, dict) else 0


def _count(node: Mapping[str, JSONValue]) -> int:
    return 1 if "job" in node else sum(_count(member) for member in _members(node))
