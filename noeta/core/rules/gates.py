"""Gates: rules that allow, deny, rewrite or ask about a tool call before it runs.

A deployment configures them (noeta.yaml `gates:`); plugins may add their own. The first
gate with an opinion decides, except that a rewrite hands the new input on to the gates
after it. Recovered calls never pass the gates again: they were allowed when they ran,
and the log records the call as actually executed.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from noeta.core.ports.payload import JSONValue
from noeta.core.ports.tool import ToolContext


@dataclass(frozen=True, slots=True)
class Allow:
    pass


@dataclass(frozen=True, slots=True)
class Deny:
    reason: str


@dataclass(frozen=True, slots=True)
class Rewrite:
    input: dict[str, JSONValue]


@dataclass(frozen=True, slots=True)
class Ask:
    question: str
    input: dict[str, JSONValue] = field(default_factory=dict)  # the call as it would run


Decision = Allow | Deny | Rewrite | Ask


class Gate(Protocol):
    def check(self, tool: str, input: dict[str, JSONValue], ctx: ToolContext) -> Decision | None:
        """A decision about this call, or None for no opinion."""
        ...


@dataclass(frozen=True)
class GateRule:
    """One configured rule: which calls it matches, and what it decides."""

    action: Literal["allow", "deny", "ask", "rewrite"]
    tool: str = "*"  # a tool name or glob
    field_name: str = ""  # the input field the conditions look at (`field:` in YAML)
    pattern: str = ""  # a regular expression searched in that field
    outside_workspace: bool = False  # the field is a path leading outside the workspace
    reason: str = ""
    set: Mapping[str, JSONValue] = field(default_factory=dict)  # rewrite: fields to set
    source: str = field(default="", compare=False)  # "noeta.yaml, line 12": for errors

    def __post_init__(self) -> None:
        re.compile(self.pattern)  # a bad pattern fails when the config loads, not mid-task

    def unmatched(self, tools: Mapping[str, Mapping[str, JSONValue]]) -> str | None:
        """Why this rule could never fire with these tools (name -> input schema), or None.

        A gate that silently never matches is a hole, not a harmless no-op: a deployment
        learns at start-up. A glob must match a tool, and one of the tools it matches
        must have the field; an exact name must be loaded and have the field.
        """
        matched = [name for name in tools if fnmatch.fnmatchcase(name, self.tool)]
        is_glob = any(mark in self.tool for mark in "*?[")
        if not matched:
            if is_glob:
                return f"no loaded tool matches {self.tool!r}"
            return f"no loaded tool is named {self.tool!r} (loaded: {', '.join(sorted(tools))})"
        if not self.field_name:
            return None
        having = [name for name in matched if self.field_name in _fields(tools[name])]
        if having:
            return None
        if is_glob:
            return f"no tool matched by {self.tool!r} has an input field {self.field_name!r}"
        fields = ", ".join(sorted(_fields(tools[self.tool]))) or "none"
        return f"tool {self.tool!r} has no input field {self.field_name!r} (its fields: {fields})"

    def check(self, tool: str, input: dict[str, JSONValue], ctx: ToolContext) -> Decision | None:
        if not fnmatch.fnmatchcase(tool, self.tool) or not self._matches(input, ctx):
            return None
        if self.action == "allow":
            return Allow()
        if self.action == "deny":
            return Deny(self.reason or f"a gate denies {tool} calls like this one")
        if self.action == "ask":
            return Ask(self.reason or f"May this {tool} call run?")
        return Rewrite({**input, **self.set})

    def _matches(self, input: dict[str, JSONValue], ctx: ToolContext) -> bool:
        if not self.field_name:
            return True
        value = input.get(self.field_name)
        if not isinstance(value, str):
            return False
        if self.pattern and not re.search(self.pattern, value):
            return False
        return not self.outside_workspace or _outside(value, ctx.workspace)


def decide(
    gates: Sequence[Gate], tool: str, input: dict[str, JSONValue], ctx: ToolContext
) -> tuple[Decision, dict[str, JSONValue]]:
    """The gates' decision on a call, and its input after any rewrites."""
    for gate in gates:
        decision = gate.check(tool, input, ctx)
        if isinstance(decision, Rewrite):
            input = decision.input
        elif decision is not None:
            return decision, input
    return Allow(), input


def _fields(schema: Mapping[str, JSONValue]) -> set[str]:
    properties = schema.get("properties")
    return set(properties) if isinstance(properties, dict) else set()


def _outside(path: str, workspace: str) -> bool:
    if not workspace:
        return True
    root = os.path.realpath(workspace)
    target = os.path.realpath(os.path.join(root, path))
    return os.path.commonpath([root, target]) != root
