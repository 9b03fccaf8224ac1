"""`derive` makes the TaskState that `dataclasses.replace` makes, each value in its field,
and leaves the state it starts from as it was."""

from __future__ import annotations

import dataclasses

import pytest

from noeta.core.rules.task_state import TaskState, derive

NAMES = tuple(TaskState.__dataclass_fields__)


def test_each_value_lands_in_its_own_field() -> None:
    values = {name: f"value of {name}" for name in NAMES}  # one distinct value per field
    derived = derive(TaskState(), values)
    assert derived == TaskState(**values)  # type: ignore[arg-type]
    assert [getattr(derived, name) for name in NAMES] == list(values.values())


def test_the_fields_not_named_are_the_start_s_and_the_start_is_unchanged() -> None:
    start = TaskState(**{name: f"start's {name}" for name in NAMES})  # type: ignore[arg-type]
    before = dataclasses.astuple(start)
    derived = derive(start, {"last_seq": 7, "finished": "done"})
    assert derived == dataclasses.replace(start, last_seq=7, finished="done")
    assert dataclasses.astuple(start) == before
    # A later derive from the derived state leaves it as it was too.
    derive(derived, {"turn": 3})
    assert derived.turn == "start's turn"


def test_a_derived_state_is_frozen() -> None:
    derived = derive(TaskState(), {"last_seq": 1})
    with pytest.raises(dataclasses.FrozenInstanceError):
        derived.last_seq = 2  # type: ignore[misc]
