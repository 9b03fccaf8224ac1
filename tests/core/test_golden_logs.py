"""Golden logs: each `logs/NAME.jsonl` folds to the state and action in `NAME.expected.json`.

Broken logs are among them (a ModelCalled without a reply, three of them, an event from
a newer version, a gap in seq): recovery is folding, so these are the recovery cases.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from noeta.core.ports.model import ToolCall
from noeta.core.ports.store import StoredEvent
from noeta.core.rules.fold import fold
from noeta.core.rules.next_action import next_action
from noeta.core.task_loading import to_logged

LOGS = Path(__file__).parent / "logs"
NAMES = sorted(path.stem for path in LOGS.glob("*.jsonl"))


def read_log(name: str) -> list[StoredEvent]:
    lines = (LOGS / f"{name}.jsonl").read_text().splitlines()
    return [
        StoredEvent("golden", row["seq"], row["type"], row["data"], None)  # type: ignore[arg-type]
        for row in map(json.loads, lines)
    ]


def plain(value: Any) -> Any:
    """Dataclasses, tuples and sets as the JSON the expectations are written in."""
    if isinstance(value, ToolCall):
        return {"id": value.id, "name": value.name, "input": value.input}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"type": type(value).__name__} | {
            f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)
        }
    if isinstance(value, (tuple, list)):
        return [plain(item) for item in value]
    if isinstance(value, frozenset):
        return sorted(value)
    return value


def test_there_are_golden_logs() -> None:
    assert len(NAMES) >= 15


@pytest.mark.parametrize("name", NAMES)
def test_golden_log(name: str) -> None:
    expected = json.loads((LOGS / f"{name}.expected.json").read_text())
    logged, problem = to_logged(read_log(name))
    assert problem == ""
    state = fold(logged)
    assert plain(next_action(state)) == expected["action"]
    for field, value in expected["state"].items():
        assert plain(getattr(state, field)) == value, field


@pytest.mark.parametrize("name", NAMES)
def test_folding_in_pieces_equals_folding_at_once(name: str) -> None:
    logged, _ = to_logged(read_log(name))
    whole = fold(logged)
    for cut in range(len(logged) + 1):
        assert fold(logged[cut:], fold(logged[:cut])) == whole
