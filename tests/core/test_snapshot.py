"""Snapshots (ADR-002): one written by an earlier noeta still loads to the same state.

`snapshots/pins_and_wakeups.bin` was written before pins were a `Pin` in the state; the
format stores each pin as its four strings, so both the old file and a new dump hold
the same document.
"""

from __future__ import annotations

import marshal
import zlib
from pathlib import Path

from noeta.core.ports.model import ToolCall
from noeta.core.ports.plugin import Pin
from noeta.core.rules import snapshot
from noeta.core.rules.events import (
    ModelCalled,
    ModelReplied,
    PluginsPinned,
    TaskCreated,
    ToolFinished,
    ToolStarted,
    WakeupScheduled,
)
from noeta.core.rules.fold import LoggedEvent, fold
from noeta.core.rules.task_state import TaskState

WRITTEN_BEFORE_THE_PIN_TYPE = Path(__file__).parent / "snapshots" / "pins_and_wakeups.bin"

WAKEUP = ToolCall("w1", "ScheduleWakeup", {"delay_seconds": 60, "prompt": "look again"})
LOG = [
    TaskCreated("scripted:x.yaml", "prompt", False, "", 100, ("ScheduleWakeup",)),
    PluginsPinned(
        (
            Pin("core", "module:noeta.plugins.core", "0.1.0", "ab12"),
            Pin("acme", "entry_point:acme", "sha256:ff", "cd34"),
        )
    ),
    ModelCalled("ab" * 32),
    ModelReplied((WAKEUP,), "tool_use"),
    ToolStarted("w1", "ScheduleWakeup", WAKEUP.input),
    ToolFinished("w1", "Wake-up scheduled", False),
    WakeupScheduled("w1", "2026-11-30T01:00:00.000+00:00", "look again"),
]


def folded() -> TaskState:
    return fold([LoggedEvent(seq, event) for seq, event in enumerate(LOG, start=1)])


def document(data: bytes) -> object:
    """The plain values a snapshot holds, under its header and checksum."""
    return marshal.loads(zlib.decompress(data[len(snapshot.FORMAT) + 32 :]))


def test_a_snapshot_written_before_the_pin_type_loads_to_the_same_state() -> None:
    state = folded()
    assert state.pins == LOG[1].pins and state.wakeups  # type: ignore[union-attr]
    assert snapshot.load(WRITTEN_BEFORE_THE_PIN_TYPE.read_bytes()) == state


def test_a_new_snapshot_holds_the_same_document_as_one_written_before() -> None:
    new = snapshot.dump(folded())
    old = document(WRITTEN_BEFORE_THE_PIN_TYPE.read_bytes())
    config, scalars, *rest = document(new)  # type: ignore[misc]
    old_config, old_scalars, *old_rest = old  # type: ignore[misc]
    # The state has gained fields since (subtasks); those hold their defaults here.
    assert (config, scalars[: len(old_scalars)], rest) == (old_config, old_scalars, old_rest)
    assert scalars[len(old_scalars) :] == snapshot._DEFAULTS[len(old_scalars) :]
    assert snapshot.load(new) == folded()
