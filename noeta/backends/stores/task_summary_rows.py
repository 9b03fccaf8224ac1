"""A task list's summaries (`TaskSummary`) from the stored text of each log's opening and
end, the same for both stores: a text cut short is read as far as it goes, and nothing
past a bound leaves the database (a prompt of a megabyte costs SUMMARY_CHARS)."""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from noeta.core.ports.store import TaskStatus
from noeta.core.ports.store_views import AGENT, TaskSummary

SUMMARY_CHARS = 1000  # of each event's stored text
INPUT_CHARS = 80  # of the one-line input a summary shows
ERROR_CHARS = 300

_STRING_BODY = re.compile(r'(?:[^"\\]|\\.)*')

# What a job's summary reads: its first event, its call (CallRequested, written with its
# creation: seq 2, or 3 after a fork's SubtaskOf), and, for a task that ended failed or
# cancelled, its TaskFinished (among the last events: a JobStopped may follow it).
OPENING_SEQ = 1
CALL_SEQS = (2, 3)
ENDING_WITHIN = 3


def string_field(text: str | None, size: int, name: str) -> str:
    """The string field `name` of a JSON object's stored text, whole or cut at `len(text)`
    of `size` characters ("" if it is not there)."""
    if not text:
        return ""
    if size <= len(text):
        try:
            value = json.loads(text).get(name)
        except (ValueError, AttributeError):
            return ""
        return value if isinstance(value, str) else ""
    marker = f'"{name}":"'
    start = text.find(marker)
    if start < 0:
        return ""
    found = _STRING_BODY.match(text, start + len(marker))
    body = found.group(0) if found else ""
    for trim in range(6):  # a cut escape (\u00e, \) is dropped, not decoded
        try:
            decoded: str = json.loads(f'"{body[: len(body) - trim]}"')
        except ValueError:
            continue
        return decoded
    return ""


def one_line(text: str, chars: int) -> str:
    said = " ".join(text.split())
    return said if len(said) <= chars else said[: chars - 1] + "…"


def job_input(text: str, size: int) -> str:
    """A job's arguments as one line of JSON (its stored text's start when cut)."""
    if size <= len(text):
        try:
            value: Any = json.loads(text).get("input")
        except (ValueError, AttributeError):
            value = None
        if value is not None:
            return json.dumps(value, ensure_ascii=False)
    _, _, rest = text.partition('"input":')
    return rest


def summary(
    task_id: str,
    status: TaskStatus,
    claims: int,
    started_at: datetime | None,
    finished_at: datetime | None,
    opening: tuple[int, str] | None,
    call: tuple[int, str] | None,
    ending: tuple[int, str] | None,
    runs: int | None,
) -> TaskSummary:
    """A summary from the row's facts and the cut texts (size, start) of its events."""
    if call is not None:
        kind = string_field(call[1], call[0], "name") or "job"
        shown = job_input(call[1], call[0])
    else:
        kind = AGENT
        shown = string_field(opening[1], opening[0], "prompt") if opening else ""
    error = string_field(ending[1], ending[0], "error") if ending else ""
    return TaskSummary(
        task_id,
        status,
        kind,
        one_line(shown, INPUT_CHARS),
        one_line(error, ERROR_CHARS),
        started_at,
        finished_at if status.finished else None,
        claims if runs is None else runs,
    )
