"""`build_state` makes the TaskState that `TaskState(*values)` makes, each value in its field."""

from __future__ import annotations

import pytest

from noeta.core.rules.task_state import TaskState, build_state


def test_each_value_lands_in_its_own_field() -> None:
    names = tuple(TaskState.__dataclass_fields__)
    values = [f"value of {name}" for name in names]  # one distinct value per field
    built = build_state(values)
    assert built == TaskState(*values)
    assert [getattr(built, name) for name in names] == values


def test_a_wrong_count_of_values_is_refused() -> None:
    values = [None] * len(TaskState.__dataclass_fields__)
    with pytest.raises(ValueError):
        build_state([*values, None])
    with pytest.raises(ValueError):
        build_state(values[1:])
