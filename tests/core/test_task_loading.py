"""The kernel's read side: the snapshot version says which code made a snapshot."""

from __future__ import annotations

import inspect
import sys
from dataclasses import replace
from datetime import UTC, datetime

from noeta.core import task_loading
from noeta.core.ports.store import Claim, KnownLog, LoadedTask, Snapshot, StoredEvent
from noeta.core.rules import events, fold
from noeta.core.rules import snapshot as task_snapshot
from noeta.core.rules.fold import LoggedEvent
from noeta.core.rules.task_state import TaskState
from noeta.core.runner.kept_states import Kept, KeptStates


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


def state_of(kept: Kept | None) -> TaskState | None:
    return None if kept is None else kept.state


def test_a_kept_state_serves_only_the_next_claim_after_the_one_that_left_it() -> None:
    kept = KeptStates(bound=2)
    state = folded(len(CANVAS_LOG))
    kept.keep(Claim("c", "w", 3, WHEN), state, 0)
    assert kept.take(Claim("c", "w", 5, WHEN)) is None  # someone claimed it in between
    kept.keep(Claim("c", "w", 3, WHEN), state, 0)
    assert kept.known("c") == KnownLog("c", 3, len(CANVAS_LOG))  # what a claim is told
    assert state_of(kept.take(Claim("c", "w", 4, WHEN))) is state
    assert kept.take(Claim("c", "w", 4, WHEN)) is None  # taken once
    assert kept.known("c") is None
    kept.keep(Claim("j", "w", 1, WHEN), TaskState(job="add"), 0)  # not a canvas
    kept.keep(Claim("f", "w", 1, WHEN), replace(state, finished="done"), 0)
    assert (
        kept.take(Claim("j", "w", 2, WHEN)) is None and kept.take(Claim("f", "w", 2, WHEN)) is None
    )
    for name in ("a", "b", "c"):
        kept.keep(Claim(name, "w", 1, WHEN), state, 0)
    assert kept.take(Claim("a", "w", 2, WHEN)) is None  # the oldest, over the bound
    assert state_of(kept.take(Claim("c", "w", 2, WHEN))) is state


def chord_state(members: int, ended: int) -> TaskState:
    """A chord's state: `members` header jobs, `ended` of them back."""
    header = [{"job": "add", "input": {"x": i}} for i in range(members)]
    tree = {"chord": [{"group": header}, {"job": "total", "input": {}}]}
    ends = tuple((f"m{i}", "done", str(i)) for i in range(ended))
    return TaskState(canvas={"tree": tree}, canvas_results=ends, last_seq=2 * members)


def test_kept_states_are_bounded_by_the_members_and_ends_they_hold() -> None:
    kept = KeptStates(bound=256, weight=1_000)
    kept.keep(Claim("small", "w", 1, WHEN), chord_state(50, 0), 0)
    kept.keep(Claim("big", "w", 1, WHEN), chord_state(600, 300), 0)  # 601 members + 300 ends
    assert kept.weight == 51 + 901
    kept.keep(Claim("more", "w", 1, WHEN), chord_state(59, 0), 0)  # over: the oldest goes
    assert kept.weight == 901 + 60 and kept.known("small") is None
    kept.keep(Claim("huge", "w", 1, WHEN), chord_state(2_000, 0), 0)  # heavier than all
    assert kept.known("huge") is None and kept.weight == 961
    # A state kept again, from the one its run took: its members are not counted again.
    before = kept.take(Claim("big", "w", 2, WHEN))
    assert before is not None and kept.weight == 60
    kept.keep(Claim("big", "w", 2, WHEN), replace(before.state, canvas_results=()), 7, before)
    assert kept.weight == 60 + 601
    again = kept.take(Claim("big", "w", 3, WHEN))
    assert again is not None and (again.members, again.snapshot_seq) == (601, 7)


class WholeLog:
    """A store whose `load` reads the log whole (and counts the reads)."""

    def __init__(self) -> None:
        self.loads = 0

    async def load(self, task_id: str, version: str) -> LoadedTask:
        self.loads += 1
        return LoadedTask(None, stored(), [])


async def test_a_claim_that_read_after_a_seq_is_folded_only_on_the_state_at_that_seq() -> None:
    whole, marked, store = folded(len(CANVAS_LOG)), replace(folded(4), depth=7), WholeLog()
    after = LoadedTask(None, stored(5), [], after_seq=4)  # the claim read after seq 4
    loaded = await task_loading.load_for_run(store, "c", "v", after, marked)  # type: ignore[arg-type]
    assert loaded[0] == replace(whole, depth=7) and store.loads == 0
    # Without the state at that seq (not kept, or another), the task is read whole.
    for known in (None, replace(folded(3), depth=7)):
        loaded = await task_loading.load_for_run(store, "c", "v", after, known)  # type: ignore[arg-type]
        assert loaded[0] == (whole if known is None else replace(whole, depth=7))
    assert store.loads == 2
