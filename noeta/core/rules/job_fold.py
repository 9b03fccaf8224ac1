"""A plain job's part of the fold (`fold.py` calls these): its call opens its one turn,
and the call's result ends it."""

from __future__ import annotations

from typing import Protocol

from noeta.core.ports.model import ToolCall, ToolResult
from noeta.core.rules.events import CallRequested


class _Folding(Protocol):
    """What of the fold's builder these read and write (fold.py's `_Folding`)."""

    job: str
    turn: int
    turn_open: bool
    calls: tuple[ToolCall, ...]
    results: list[ToolResult]
    last_turn_outcome: str
    last_answer: str
    last_turn_error: str


def request_call(f: _Folding, event: CallRequested) -> None:
    """A plain job: one turn whose only step is the call (no model, no message)."""
    f.job = event.name
    f.turn += 1
    f.turn_open = True
    f.calls = (ToolCall(event.call_id, event.name, event.input),)


def end_job_call(f: _Folding, content: str, is_error: bool) -> None:
    """A plain job's call settled: its result (or error, "outcome unknown" included) is
    the turn's, so the task finishes with it."""
    f.turn_open = False
    f.calls = ()
    f.results = []
    f.last_turn_outcome = "failed" if is_error else "answered"
    f.last_answer, f.last_turn_error = ("", content) if is_error else (content, "")
