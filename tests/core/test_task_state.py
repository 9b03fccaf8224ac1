"""`state_of` makes the TaskState that `TaskState(**values)` makes, each value in its field;
a fold, which makes its states so from a copy of its start's fields, leaves the start as
it was."""

from __future__ import annotations

import dataclasses

import pytest

from noeta.core.ports.model import Text, ToolCall, Usage
from noeta.core.rules import events as ev
from noeta.core.rules.fold import LoggedEvent, fold
from noeta.core.rules.task_state import TaskState, state_of

NAMES = tuple(TaskState.__dataclass_fields__)


def test_each_value_lands_in_its_own_field() -> None:
    values = {name: f"value of {name}" for name in NAMES}  # one distinct value per field
    made = state_of(dict(values))
    assert made == TaskState(**values)  # type: ignore[arg-type]
    assert [getattr(made, name) for name in NAMES] == list(values.values())


def test_a_state_so_made_is_frozen() -> None:
    made = state_of(dataclasses.asdict(TaskState()))
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.last_seq = 2  # type: ignore[misc]


def test_a_fold_leaves_the_state_it_starts_from_as_it_was() -> None:
    call = ToolCall("c1", "echo", {})
    log = [
        ev.TaskCreated("scripted:x", "go"),
        ev.ModelCalled("ab" * 32),
        ev.ModelReplied((Text("on it"), call), "tool_use", Usage(5, 1)),
        ev.ToolStarted("c1", "echo", {}),
    ]
    start = fold(LoggedEvent(seq, event) for seq, event in enumerate(log, start=1))
    before = dataclasses.astuple(start)
    # The next events change collections and scalars: the call ends, the task too.
    more = [ev.ToolFinished("c1", "done"), ev.ModelCalled("cd" * 32), ev.TaskFinished("done")]
    after = fold((LoggedEvent(seq, event) for seq, event in enumerate(more, start=5)), start)
    assert dataclasses.astuple(start) == before
    assert after.last_seq == 7 and after.finished == "done" and after.started == ()
    assert start.started == (("c1", 1),) and start.results == ()
