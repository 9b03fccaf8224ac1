"""What must hold of any task's log, however its workers died: checked after a cluster run.

Each check reads the stored events (type and data) of one task, in seq order, and returns
the problems it found, as sentences; none is good.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from noeta.core.ports.store import CANCEL_KEY, InboxEntry, StoredEvent

# Events that take an inbox entry, and the field naming it.
_TAKES = {
    "MessageTaken": "inbox_id",
    "JobFinished": "inbox_id",
    "ToolAnswered": "inbox_id",
    "SubtaskReturned": "inbox_id",
}


def check_log(events: Sequence[StoredEvent], inbox: Sequence[InboxEntry]) -> list[str]:
    return [
        *_seq_is_contiguous(events),
        *_model_calls_pair_up(events),
        *_tool_starts_and_finishes_pair_up(events),
        *_no_inbox_entry_taken_twice(events, inbox),
        *_each_job_ends_once(events),
        *_epochs_never_go_back(events),
        *_one_owner_per_epoch(events),
    ]


def check_log_so_far(events: Sequence[StoredEvent]) -> list[str]:
    """The checks that must hold at every commit of a log, a running task's too: each
    blames an event by what came before it, so what one finds was a broken log when read."""
    return [
        *_seq_is_contiguous(events),
        *_model_calls_pair_up(events),
        *_tool_starts_and_finishes_pair_up(events),
        *_epochs_never_go_back(events),
        *_one_owner_per_epoch(events),
    ]


def takes_marked(events: Sequence[StoredEvent], inbox: Sequence[InboxEntry]) -> list[str]:
    """Every take in the log is marked in the inbox, read after the log: the append that
    takes an entry marks it in the same transaction, and a mark is never undone."""
    marked = {entry.id for entry in inbox if entry.taken_seq is not None}
    return [
        f"seq {event.seq}: inbox entry {entry} taken, not marked taken in the inbox"
        for event in events
        if (field := _TAKES.get(event.type)) and (entry := _data(event).get(field)) not in marked
    ]


def _data(event: StoredEvent) -> dict[str, Any]:
    return event.data if isinstance(event.data, dict) else {}


def _seq_is_contiguous(events: Sequence[StoredEvent]) -> list[str]:
    seqs = [event.seq for event in events]
    return [] if seqs == list(range(1, len(seqs) + 1)) else [f"seqs are not 1..n: {seqs}"]


def _model_calls_pair_up(events: Sequence[StoredEvent]) -> list[str]:
    """Every reply (or failure) closes a call made before it; a crash may leave calls
    without a reply, re-sent, but never a reply without a call."""
    problems, open_calls = [], 0
    for event in events:
        if event.type == "ModelCalled":
            open_calls += 1
        elif event.type in ("ModelReplied", "ModelFailed"):
            if open_calls == 0:
                problems.append(f"seq {event.seq}: {event.type} without a ModelCalled")
            open_calls = 0
        elif event.type == "TurnEnded":
            open_calls = 0  # a turn failed by the interruption cap closes its calls
    return problems


def _tool_starts_and_finishes_pair_up(events: Sequence[StoredEvent]) -> list[str]:
    """Every finish follows a start of the same call, and a call finishes once."""
    problems, started, finished = [], set[str](), set[str]()
    for event in events:
        call = str(_data(event).get("call_id", ""))
        if event.type == "ToolStarted":
            if call in finished:
                problems.append(f"seq {event.seq}: {call} started again after it finished")
            started.add(call)
        elif event.type == "ToolFinished":
            if call not in started:
                problems.append(f"seq {event.seq}: {call} finished without a start")
            if call in finished:
                problems.append(f"seq {event.seq}: {call} finished twice")
            finished.add(call)
    return problems


def _no_inbox_entry_taken_twice(
    events: Sequence[StoredEvent], inbox: Sequence[InboxEntry]
) -> list[str]:
    taken = Counter(
        _data(event).get(field) for event in events if (field := _TAKES.get(event.type))
    )
    problems = [f"inbox entry {entry} taken {n} times" for entry, n in taken.items() if n > 1]
    # A cancel request is taken by the append that finishes the task as cancelled.
    cancelled = bool(events) and _data(events[-1]).get("status") == "cancelled"
    marked = {
        entry.id
        for entry in inbox
        if entry.taken_seq is not None and not (cancelled and entry.dedupe_key == CANCEL_KEY)
    }
    if marked != set(taken):
        problems.append(
            f"inbox marks {sorted(marked)} differ from the log's {sorted(taken, key=str)}"
        )
    return problems


def _each_job_ends_once(events: Sequence[StoredEvent]) -> list[str]:
    """A background job ends in the log as finished, lost or stopped, once: the model is
    told once."""
    started = [str(_data(e).get("job_id")) for e in events if e.type == "JobStarted"]
    ended = Counter(
        str(_data(e).get("job_id"))
        for e in events
        if e.type in ("JobFinished", "JobLost", "JobStopped")
    )
    problems = [f"job {job} ended {ended[job]} times" for job in started if ended[job] != 1]
    problems += [f"job {job} ended but never started" for job in ended if job not in started]
    return problems


def _epochs_never_go_back(events: Sequence[StoredEvent]) -> list[str]:
    """Each event records the epoch of the claim that appended it (the store writes it):
    along the log it never decreases, or a stale claim wrote after a newer one."""
    problems, highest = [], 0
    for event in events:
        if event.epoch < highest:
            problems.append(f"seq {event.seq}: epoch {event.epoch} after epoch {highest}")
        highest = max(highest, event.epoch)
    return problems


def _one_owner_per_epoch(events: Sequence[StoredEvent]) -> list[str]:
    """An epoch is one claim: every event appended under it names the same owner (the one
    the task row held when the store wrote it). Two owners in one epoch: a write that got
    past the fence while another worker held the task."""
    owners: dict[int, set[str | None]] = {}
    for event in events:
        if event.epoch:
            owners.setdefault(event.epoch, set()).add(event.owner)
    return [
        f"epoch {epoch} written under owners {sorted(map(str, names))}"
        for epoch, names in sorted(owners.items())
        if len(names) > 1
    ]
