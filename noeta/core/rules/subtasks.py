"""Subtasks: their ids, limits, handback key and payload, and the words the model reads.

Pure rules the runner and the `Agent` tool share. A subtask's id is `<task>.<call>.<n>`
(n: the parent's n-th subtask), so every worker derives the same id from the same log.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING

from noeta.core.errors import PayloadError
from noeta.core.ports.payload import JSONValue
from noeta.core.rules.task_id import MAX_TASK_ID_CHARS, check_task_id

if TYPE_CHECKING:  # the Agent tool loads without the fold (`noeta submit` lists tools)
    from noeta.core.rules.task_state import TaskState

# How deep subtasks may nest: a task at this depth launches no more (its root is depth 0).
MAX_SUBTASK_DEPTH = 3
# Subtasks one task may launch over its whole life, and in one turn.
MAX_CHILDREN_PER_TASK = 16
MAX_CHILDREN_PER_TURN = 8

# A call id used as is in a child's id: the characters the task id rule allows (ADR-0036),
# but no '.', so that a child's parent is its id before the last two dots.
_CALL_PART = re.compile(r"[A-Za-z0-9_:-]+")
_CHILD_NUMBER = re.compile(r"[0-9]+")

# A handback's dedupe key: `subtasks:handback:<parent id>:<Agent call id>` (the call's
# idempotency key), so a second delivery of one child's report is dropped.
HANDBACK_PREFIX = "subtasks:handback:"
HANDBACK_KIND = "handback"

TOO_DEEP = (
    f"this task is a subtask {MAX_SUBTASK_DEPTH} levels deep; that is the limit, so it "
    "cannot launch subagents: do the work itself"
)
TOO_MANY = (
    f"this task has launched {MAX_CHILDREN_PER_TASK} subagents; that is the limit for one task"
)
TOO_MANY_THIS_TURN = (
    f"{MAX_CHILDREN_PER_TURN} subagents were launched in this turn; that is the limit per turn"
)
NOT_STARTED = (
    "The subagent was not started: the worker stopped before its launch was recorded "
    "(nothing ran). Call Agent again if it is still needed."
)


@dataclass(frozen=True, slots=True)
class Handback:
    """A child's final report, as delivered to its parent's inbox."""

    child_id: str
    call_id: str
    status: str  # "done", "failed", "cancelled"
    report: str
    # The child's tree's spend, for the parent's budget it drew on (ADR-0107): 0 and ""
    # where it had no budget (none is sent).
    tokens: int = 0
    cost: str = ""

    @property
    def is_error(self) -> bool:
        return self.status != "done"

    def result(self) -> str:
        """The Agent call's result, as the parent's model reads it."""
        if self.status == "done":
            return self.report or f"(subagent {self.child_id} finished without an answer)"
        return f"The subagent {self.child_id} {self.status}: {self.report or 'no reason given'}"

    def payload(self) -> JSONValue:
        return {
            "kind": HANDBACK_KIND,
            "child": self.child_id,
            "call_id": self.call_id,
            "status": self.status,
            "report": self.report,
            **({"tokens": self.tokens, "cost": self.cost} if self.cost or self.tokens else {}),
        }


def limit_reached(state: TaskState) -> str:
    """Why this task may launch no subtask now ("" if it may): depth, per task, per turn."""
    if state.depth >= MAX_SUBTASK_DEPTH:
        return TOO_DEEP
    if state.children >= MAX_CHILDREN_PER_TASK:
        return TOO_MANY
    if state.turn_children >= MAX_CHILDREN_PER_TURN:
        return TOO_MANY_THIS_TURN
    return ""


def handback_key(parent_id: str, call_id: str) -> str:
    return f"{HANDBACK_PREFIX}{parent_id}:{call_id}"


def read_handback(payload: JSONValue) -> Handback | None:
    """The handback an inbox entry holds, or None if it holds something else."""
    if not isinstance(payload, dict) or payload.get("kind") != HANDBACK_KIND:
        return None
    return Handback(
        str(payload.get("child", "")),
        str(payload.get("call_id", "")),
        str(payload.get("status", "failed")),
        str(payload.get("report", "")),
        _count(payload.get("tokens")),
        _usd(payload.get("cost")),
    )


def _usd(value: JSONValue) -> str:
    """A reported cost: a decimal string, "" none, else unknown (never taken as 0)."""
    if value in (None, ""):
        return ""
    try:
        return str(Decimal(str(value))) if Decimal(str(value)).is_finite() else "unknown"
    except InvalidOperation:
        return "unknown"


def _count(value: JSONValue) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def child_id(task_id: str, call_id: str, n: int) -> str:
    """`<task>.<call>.<n>`; a call id the id rule does not allow (or one that would make
    the id too long) is replaced by `c` and 12 hex digits of its hash. Raises ValueError
    if even that is too long: the task id leaves no room to nest (ADR-0045)."""
    if not _CALL_PART.fullmatch(call_id):
        call_id = _short(call_id)
    candidate = f"{task_id}.{call_id}.{n}"
    if len(candidate) > MAX_TASK_ID_CHARS:
        candidate = f"{task_id}.{_short(call_id)}.{n}"
    try:
        return check_task_id(candidate)
    except PayloadError:
        raise ValueError(
            f"a subtask of {task_id[:40]!r} would have an id over {MAX_TASK_ID_CHARS} "
            "characters (or one the task id rule refuses); give the task a shorter id to "
            "nest subagents"
        ) from None


def possible_parent_ids(task_id: str) -> list[str]:
    """Every id whose subtask `task_id` may be: `<p>` of `<p>.<call>.<n>`, for each way
    to cut it. Children launched before call ids with dots were hashed have a call part
    with dots, so the family rule of pruning (ADR-0066) asks about each."""
    parts = task_id.split(".")
    if len(parts) < 3 or not _CHILD_NUMBER.fullmatch(parts[-1]):
        return []
    return [".".join(parts[:cut]) for cut in range(1, len(parts) - 1)]


def _short(call_id: str) -> str:
    return "c" + hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def branch_name(child: str) -> str:
    """The git branch of a child's worktree: its id, with ':' (not allowed in a ref) as '_'."""
    return "noeta/" + child.replace(":", "_")
