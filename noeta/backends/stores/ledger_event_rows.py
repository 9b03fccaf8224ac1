"""The events a ledger reads (`StoreViews.ledger_events`), the same for both stores: a
short event's stored text whole, a long one's opening and end only (a reply of a
megabyte costs two PART_CHARS), its ledger's fields found there and the rest defaulted.
Never decoded by the database: PostgreSQL refuses a lone surrogate in `json`."""

from __future__ import annotations

import json
import re
from datetime import datetime

from noeta.core.ports import payload
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.store import StoredEvent

WHOLE_CHARS = 4096  # an event this long or shorter leaves the database whole
PART_CHARS = 1024  # of a longer one: its first and last characters

# Where a long event's ledger fields are: fields are stored in their class's order, so a
# TaskCreated's model follows its version and a reply's usage (or a call's estimate, a
# fork point) is among the last; a field inside a string has its quote escaped, so a
# top-level key is the last `,"name":` or `{"name":` in the text's end.
_IN_OPENING = {"TaskCreated": ("model",), "ModelCallCut": ("epoch", "cause")}
_IN_END = {
    "TaskCreated": ("forked_at",),
    "ModelReplied": ("usage",),
    "ModelCalled": ("input_estimate",),
}
# What a type needs beyond them to be decoded (its fields without defaults).
_REQUIRED: dict[str, dict[str, JSONValue]] = {
    "ModelReplied": {"content": [], "stop_reason": ""},
    "ModelCalled": {"request_sha256": ""},
    "ModelFailed": {"error": "", "attempts": 0},
}
_VERSION = re.compile(r'\{\s*"v"\s*:\s*(\d+)')
_DECODER = json.JSONDecoder()


def ledger_event(
    task_id: str,
    seq: int,
    event_type: str,
    created_at: datetime,
    whole: str | None,
    opening: str | None,
    end: str | None,
) -> StoredEvent:
    """One event as `ledger_events` returns it: decoded whole, or its fields from its
    `opening` and `end`."""
    if whole is not None:
        return StoredEvent(task_id, seq, event_type, payload.decode(whole), created_at)
    data: dict[str, JSONValue] = dict(_REQUIRED.get(event_type, {}))
    version = _VERSION.match(opening or "")
    if version is not None:
        data["v"] = int(version.group(1))
    for name in _IN_OPENING.get(event_type, ()):
        _take(data, name, opening or "", last=False)
    for name in _IN_END.get(event_type, ()):
        _take(data, name, end or "", last=True)
    return StoredEvent(task_id, seq, event_type, data, created_at)


def _take(data: dict[str, JSONValue], name: str, text: str, *, last: bool) -> None:
    found = list(re.finditer(rf'[{{,]\s*"{name}"\s*:\s*', text))
    if not found:
        return  # absent: the field's default, as a decoded whole event would have it
    where = found[-1] if last else found[0]
    try:
        data[name], _ = _DECODER.raw_decode(text, where.end())
    except ValueError:
        return
