"""Loading a task's state: the newest usable snapshot, then the log after it, folded.

The kernel's read side: the runner loads with it, and so do readers that only look (the
client's answer, the web pages, `bench`); none of them needs the runner for it.
"""

from __future__ import annotations

import functools
import inspect
import logging
import zlib
from collections.abc import Sequence
from dataclasses import replace

from noeta.core.ports import model
from noeta.core.ports.store import InboxEntry, LoadedTask, Store, StoredEvent
from noeta.core.rules import events, fold, snapshot, task_state
from noeta.core.rules.events import decode
from noeta.core.rules.fold import LoggedEvent
from noeta.core.rules.task_state import TaskState

log = logging.getLogger(__name__)

# The code that decides what a fold produces: a snapshot of other code is not used.
# Read at import, as the code that runs is the code imported.
_FOLD_CODE = "".join(
    inspect.getsource(module) for module in (events, fold, task_state, model, snapshot)
)


def fold_code() -> str:
    """The source of the modules that decide what a fold produces."""
    return _FOLD_CODE


@functools.lru_cache(maxsize=64)
def snapshot_version(agent: str = "", pins: tuple[str, ...] = ()) -> str:
    """Cached: hashing the fold's source on every claim was a measurable part of a task."""
    return snapshot.version_of(fold_code(), agent, *pins)


def to_logged(stored: Sequence[StoredEvent]) -> tuple[list[LoggedEvent], str]:
    """Decode stored events; stops at the first malformed one and says why."""
    logged = []
    for event in stored:
        try:
            logged.append(LoggedEvent(event.seq, decode(event.type, event.data)))
        except ValueError as error:
            return logged, f"event {event.seq} cannot be read: {error}"
    return logged, ""


async def load_state(store: Store, task_id: str, version: str) -> TaskState:
    return (await load_for_run(store, task_id, version))[0]


async def load_for_run(
    store: Store,
    task_id: str,
    version: str,
    loaded: LoadedTask | None = None,
    known: TaskState | None = None,
) -> tuple[TaskState, list[InboxEntry]]:
    """The task's state, and its untaken inbox: one round trip on PostgreSQL, none when
    the claim read the task already (`loaded`, from `Store.claim_and_load`). `known`: a
    state of this task this code folded before (ADR-0120), continued with only the events
    after it when what was read holds them all. A claim that read only the events after
    a seq (`loaded.after_seq`, ADR-0122) is used only on top of the state at that seq;
    without it, the task is read whole."""
    read_after = loaded.after_seq if loaded is not None else None
    if read_after is not None and (known is None or known.last_seq != read_after):
        loaded = None  # read after a state this load was not given
    if loaded is None:
        loaded = await store.load(task_id, version)
    if known is not None and (after := _after(loaded, known.last_seq)) is not None:
        logged, problem = to_logged(after)
        state = fold.fold(logged, known)
        return _marked(state, problem), loaded.inbox
    start: TaskState | None = None
    stored = loaded.events
    if loaded.snapshot is not None:
        try:
            start = snapshot.load(loaded.snapshot.data)
        except (ValueError, KeyError, TypeError, EOFError, zlib.error) as error:
            log.warning("task %s: ignoring an unreadable snapshot: %s", task_id, error)
            stored = await store.read_log(task_id)  # the events after it are not enough
    logged, problem = to_logged(stored)
    return _marked(fold.fold(logged, start), problem), loaded.inbox


def _after(loaded: LoadedTask, seq: int) -> list[StoredEvent] | None:
    """The events `loaded` holds after `seq`, if it holds every one of them (it reaches
    `seq` and starts no later than just after it); None otherwise."""
    if loaded.after_seq is not None:
        base = loaded.after_seq
    else:
        base = loaded.snapshot.seq if loaded.snapshot is not None else 0
    last = loaded.events[-1].seq if loaded.events else base
    if not base <= seq <= last:
        return None
    return [event for event in loaded.events if event.seq > seq]


def _marked(state: TaskState, problem: str) -> TaskState:
    return replace(state, unreadable=problem) if problem and not state.unreadable else state
