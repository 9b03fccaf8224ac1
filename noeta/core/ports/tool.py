"""The tool port: what a tool declares and how it is run, recovered and keyed.

`ctx.idempotency_key` is `<task id>:<call id>`, the same on every worker and attempt, so a
tool can hand it to systems that drop duplicates, or use it to find what a half-done call
did (`recover`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol, runtime_checkable

from noeta.core.ports.model import ToolSpec
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.store import Claim

# A retry_safe call interrupted by crashes is started at most this many times in total.
MAX_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class ToolFlags:
    retry_safe: bool = False  # re-running changes nothing outside the call
    # The tool launches subtasks (Agent): the runner checks the limits before it runs,
    # gives it the child's id, and creates the child with the call's wait.
    launches_subtasks: bool = False
    # A sync function run in a thread (`@noeta.tool` on a def): a cancel cannot stop it, so
    # the runner lets it end and records that it had finished (issue 29 item 4).
    runs_in_a_thread: bool = False
    # A retry_safe call is started at most this many times in all, crashes included
    # (a job's `max_attempts`); None: MAX_ATTEMPTS.
    max_attempts: int | None = None


# What a tool's output hook hears: more of its stdout or stderr, as it is written, or
# that the output passed the bound of the stored result (nothing more comes).
OutputName = Literal["stdout", "stderr", "truncated"]
OutputHook = Callable[[OutputName, str], None]


@dataclass(frozen=True, slots=True)
class ToolContext:
    task_id: str
    call_id: str
    # The task's own folder: file tools stay inside it (empty: no file access).
    workspace: str = ""
    # For a tool that launches subtasks: the id its child gets (the same on every attempt).
    subtask_id: str = ""
    # A plain job's attempt, counted from its log (1 for the first); 0: not a job's call,
    # so a failure the tool retries is retried within the call, not through the queue.
    attempt: int = 0
    # A tool's output as it is written (ADR-0114): `on_output("stdout", text)` streams it
    # to the task's readers, if any (then "truncated" once past the result's bound). It
    # keeps the text and returns (any thread); None: this call does not stream.
    on_output: OutputHook | None = field(default=None, repr=False, compare=False)

    @property
    def idempotency_key(self) -> str:
        return f"{self.task_id}:{self.call_id}"


@dataclass(frozen=True, slots=True)
class BackgroundJob:
    """A command to run under the worker after the call that asked for it is recorded."""

    command: str
    cwd: str
    timeout_seconds: float
    # What the command's process starts with (never logged; may hold a passed token).
    environment: Mapping[str, str] | None = field(default=None, repr=False)
    # What its process may reach, as the tool that made the job decided; the worker hands
    # it back to that tool's runner untouched (the core plugin's Bash: its Confinement).
    confinement: object | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class Wakeup:
    """Wake the task later with `prompt`: after `delay_seconds` on the store's clock, or
    `at`. Recorded with the call's result; due, it opens a turn exactly once."""

    prompt: str
    delay_seconds: float | None = None
    at: datetime | None = None


@dataclass(frozen=True, slots=True)
class SubtaskRequest:
    """A child task to create, in one append with the call's wait (ctx.subtask_id)."""

    prompt: str
    description: str = ""
    model: str = ""  # "": the parent's model
    tools: tuple[str, ...] | None = None  # None: the parent's tools


@dataclass(frozen=True, slots=True)
class FailedAttempt:
    """A job's attempt raised (`error`, after `seconds`): it is retried through the queue
    `retry_in` seconds from now; None: no attempt is left, the output is the job's end."""

    error: str
    seconds: float
    retry_in: float | None = None


@dataclass(frozen=True, slots=True)
class ToolOutput:
    content: str
    is_error: bool = False
    background: BackgroundJob | None = None
    wakeup: Wakeup | None = None
    subtask: SubtaskRequest | None = None
    failed_attempt: FailedAttempt | None = None


class Jobs(Protocol):
    """The worker's background jobs: their results are delivered to the task's inbox."""

    def start(self, claim: Claim, job_id: str, job: BackgroundJob) -> None: ...

    def running(self, claim: Claim) -> set[str]:
        """The jobs running under this claim (not under another epoch of its task)."""
        ...


class Tool(Protocol):
    """A tool the model can call. `run` may also be a plain function (it runs in a thread).

    Raise `ToolError` for a failure the model should read; any other exception is also
    reported to the model, as the tool's failure.
    """

    name: str
    description: str
    input_schema: dict[str, JSONValue]
    flags: ToolFlags

    async def run(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput: ...


class ToolError(Exception):
    """A tool's own, expected failure: its message is the result the model sees."""


@runtime_checkable
class RecoverableTool(Protocol):
    """A tool that can find out what a half-done call did."""

    async def recover(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput | None: ...


@runtime_checkable
class LaunchingTool(Protocol):
    """A tool that launches subtasks and prepares their workspaces (a git worktree)."""

    async def remove_workspace(self, child_id: str, ctx: ToolContext, *, keep_work: bool) -> None:
        """Remove what the launch made for `child_id`; idempotent. `keep_work`: the child
        ran and handed back (commit what it left on its branch); else it never started."""
        ...


def spec_of(tool: Tool) -> ToolSpec:
    return ToolSpec(tool.name, tool.description, tool.input_schema)


OUTCOME_UNKNOWN = (
    "Interrupted before its result was recorded, so its outcome is unknown: it may have "
    "taken full, partial or no effect. Verify its effect before running it again."
)
