"""The kernel's read side: the snapshot version says which code made a snapshot."""

from __future__ import annotations

import inspect
import sys
from dataclasses import replace
from datetime import UTC, datetime

from noeta.core import task_loading
from noeta.core.ports.store import Claim, LoadedTask, Snapshot, StoredEvent
from noeta.core.rules import events, fold
from noeta.core.rules import snapshot as task_snapshot
from noeta.core.rules.fold import LoggedEvent
from noeta.core.rules.task_state import TaskState
from noeta.core.runner.kept_states import KeptStates


def test_the_snapshot_version_covers_the_modules_that_define_the_folded_state() -> None:
    """A snapshot is the TaskState marshalled by position: a change to the module that
    defines it (or the events it is folded from) must give another snapshot version."""
    hashed = task_loading.fold_code()
    for kind in (TaskState, LoggedEvent):
        source = inspect.getsource(sys.modules[kind.__module__])
        assert source in hashed, f"{kind.__module__} is not part of the snapshot version"


# A canvas's state kept between its steps (ADR-0120) -----------------------------------

CANVAS_LOG = [
    events.TaskCreated(model="", tools=()),
    events.CanvasRequested({"jobs": {}, "tree": {"chain": []}, "queue": "default"}),
    events.SubtaskLaunched("m0", "c.m0.1", "add"),
    events.SubtaskReturned("c.m0.1", "done", 1, "2"),
    events.SubtaskLaunched("m1", "c.m1.1", "add"),
    events.SubtaskReturned("c.m1.1", "done", 2, "3"),
    events.SubtaskLaunched("m2", "c.m2.1", "add"),
]
WHEN = datetime(2026, 12, 6, tzinfo=UTC)


def stored(first: int = 1) -> list[StoredEvent]:
    encoded = [events.encode(event) for event in CANVAS_LOG]
    return [
        StoredEvent("c", seq, kind, data, WHEN)
        for seq, (kind, data) in enumerate(encoded, start=1)
        if seq >= first
    ]


def folded(through: int) -> TaskState:
    return fold.fold(LoggedEvent(e.seq, events.decode(e.type, e.data)) for e in stored()[:through])


async def load(loaded: LoadedTask, known: TaskState | None) -> TaskState:
    return (await task_loading.load_for_run(None, "c", "v", loaded, known))[0]  # type: ignore[arg-type]


async def test_a_known_state_is_continued_with_only_the_events_after_it() -> None:
    whole = folded(len(CANVAS_LOG))
    marked = replace(folded(4), depth=7)  # what only a fold that starts from it keeps
    state = await load(LoadedTask(None, stored(), []), marked)
    assert state == replace(whole, depth=7)
    snapshot = Snapshot("c", "v", 3, task_snapshot.dump(folded(3)))
    assert await load(LoadedTask(snapshot, stored(4), []), marked) == replace(whole, depth=7)
    assert await load(LoadedTask(snapshot, stored(4), []), None) == whole


async def test_a_known_state_the_read_log_does_not_reach_or_has_passed_is_not_used() -> None:
    whole = folded(len(CANVAS_LOG))
    newer = Snapshot("c", "v", 5, task_snapshot.dump(folded(5)))
    assert await load(LoadedTask(newer, stored(6), []), replace(folded(4), depth=7)) == whole
    shorter = LoadedTask(None, stored()[:3], [])  # a log that ends before the known state
    assert await load(shorter, replace(folded(4), depth=7)) == folded(3)


def test_a_kept_state_serves_only_the_next_claim_after_the_one_that_left_it() -> None:
    kept = KeptStates(bound=2)
    state = folded(len(CANVAS_LOG))
    kept.keep(Claim("c", "w", 3, WHEN), state)
    assert kept.take(Claim("c", "w", 5, WHEN)) is None  # someone claimed it in between
    kept.keep(Claim("c", "w", 3, WHEN), state)
    assert kept.take(Claim("c", "w", 4, WHEN)) is state
    assert kept.take(Claim("c", "w", 4, WHEN)) is None  # taken once
    kept.keep(Claim("j", "w", 1, WHEN), TaskState(job="add"))  # not a canvas
    kept.keep(Claim("f", "w", 1, WHEN), replace(state, finished="done"))
    assert (
        kept.take(Claim("j", "w", 2, WHEN)) is None and kept.take(Claim("f", "w", 2, WHEN)) is None
    )
    for name in ("a", "b", "c"):
        kept.keep(Claim(name, "w", 1, WHEN), state)
    assert kept.take(Claim("a", "w", 2, WHEN)) is None  # the oldest, over the bound
    assert kept.take(Claim("c", "w", 2, WHEN)) is state
