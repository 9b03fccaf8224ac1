"""What a text search matches in a task (ADR-0102): its id, its prompt's opening, a job's
function name and a failed or cancelled task's error, as one lowercased text a row of
`task_search` holds, and the LIKE pattern that finds a text in it."""

from __future__ import annotations

import re

from noeta.backends.stores.task_summary_rows import string_field
from noeta.core.ports.store import TaskStatus
from noeta.core.ports.store_views import AGENT, error_kind, text_pattern

# Of each event's stored text: a prompt's first two thousand-odd characters are searched
# (the opening of a prompt says what it is; a megabyte's would bloat the index).
SEARCH_CHARS = 2000
# Replaces what PostgreSQL's text cannot hold: a NUL, and a lone surrogate (tool output
# decoded with surrogateescape), which no encoding to UTF-8 takes.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def haystack(
    task_id: str,
    opening: tuple[int, str] | None,
    call: tuple[int, str] | None,
    ending: tuple[int, str] | None,
) -> str:
    """A task's searched text from the (size, cut stored text) of its first event, its
    call and its TaskFinished; lowercased, one field a line."""
    fields = [task_id]
    if opening is not None:
        fields.append(string_field(opening[1], opening[0], "prompt"))
    if call is not None:
        fields.append(string_field(call[1], call[0], "name"))
    if ending is not None:
        fields.append(string_field(ending[1], ending[0], "error"))
    return storable("\n".join(field for field in fields if field).lower())


def how_it_ended(
    status: TaskStatus, call: tuple[int, str] | None, ending: tuple[int, str] | None
) -> tuple[str | None, str | None, str | None]:
    """A failed or cancelled task's status, error kind and kind (agent or the job's
    function), as the failures page groups them (ADR-0112); (None, None, None) for any
    other task."""
    if status not in (TaskStatus.FAILED, TaskStatus.CANCELLED):
        return None, None, None
    kind = AGENT if call is None else string_field(call[1], call[0], "name") or "job"
    error = string_field(ending[1], ending[0], "error") if ending else ""
    cancelled = status is TaskStatus.CANCELLED
    return status.value, storable(error_kind(error, cancelled=cancelled)), storable(kind)


def storable(text: str) -> str:
    return _UNSTORABLE.sub("\ufffd", text)


def needle(text: str) -> str:
    """The LIKE pattern (escape `\\`) for `text` anywhere in a haystack."""
    return text_pattern(storable(text.lower()))
