"""The kernel's read side: the snapshot version says which code made a snapshot."""

from __future__ import annotations

import inspect
import sys

from noeta.core import task_loading
from noeta.core.rules.fold import LoggedEvent
from noeta.core.rules.task_state import TaskState


def test_the_snapshot_version_covers_the_modules_that_define_the_folded_state() -> None:
    """A snapshot is the TaskState marshalled by position: a change to the module that
    defines it (or the events it is folded from) must give another snapshot version."""
    hashed = task_loading.fold_code()
    for kind in (TaskState, LoggedEvent):
        source = inspect.getsource(sys.modules[kind.__module__])
        assert source in hashed, f"{kind.__module__} is not part of the snapshot version"
