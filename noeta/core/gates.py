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

from noeta.core.payload import JSONValue
from noeta.core.tool import ToolContext


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

    def __post_init__(self) -> None:
        re.compile(self.pattern)  # a bad pattern fails when the config loads, not mid-task

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


def _outside(path: str, workspace: str) -> bool:
    if not workspace:
        return True
    root = os.path.realpath(workspace)
    target = os.path.realpath(os.path.join(root, path))
    return os.path.commonpath([root, target]) != root
