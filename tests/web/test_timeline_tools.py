"""A TaskCreated's tools on the timeline: its own list, none, or its worker's (null)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from noeta.core.ports.payload import JSONValue
from noeta.core.ports.store_views import LogEntry
from noeta.web.timeline import Context, render


@pytest.mark.parametrize(
    ("tools", "shown"),
    [(["Read", "Bash"], "tools: Read, Bash"), ([], "tools: none"), (None, "tools: its worker")],
)
def test_the_created_event_says_which_tools_the_task_has(tools: JSONValue, shown: str) -> None:
    data: dict[str, JSONValue] = {"v": 2, "model": "scripted:x", "prompt": "hi", "tools": tools}
    entry = LogEntry(1, "TaskCreated", datetime.now(UTC), 0, None, 10, data, "")
    assert shown in render("t", [entry], Context())
