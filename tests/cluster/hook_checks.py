"""The checks of the example notify plugin (examples/notify_plugin.py), which every
cluster worker loads: each finished task notified in its outbox, with its finish; and its
at-least-once `on_event` ledger with no gap (duplicates allowed, and counted)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from noeta.core.ports.store import InboxEntry, StoredEvent
from tests.cluster.fanout import OUTBOX

EVENTS = "events.log"  # the plugin's ledger: "<task> <seq> <type>" per event it was given


def _data(event: StoredEvent) -> dict[str, Any]:
    return event.data if isinstance(event.data, dict) else {}


def ledger(scratch: Path) -> Counter[tuple[str, int, str]]:
    path = scratch / EVENTS
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter((task, int(seq), kind) for task, seq, kind in (line.split() for line in lines))


def check_notifications(
    logs: dict[str, list[StoredEvent]], outbox: list[InboxEntry], scratch: Path
) -> list[str]:
    problems: list[str] = []
    notes = {entry.dedupe_key: entry.payload for entry in outbox}
    finishes = {
        task: log[-1] for task, log in logs.items() if log and log[-1].type == "TaskFinished"
    }
    for task, finish in finishes.items():
        key = f"notify:{task}:{finish.seq}"
        text = {"text": f"task {task} {_data(finish)['status']}"}
        if notes.get(key) != text:
            problems.append(f"{task}: finished, but its notification is {notes.get(key)!r}")
    expected = {f"notify:{task}:{finish.seq}" for task, finish in finishes.items()}
    problems += [f"notification {key} for no finish" for key in notes if key not in expected]
    return problems + on_event_gaps(logs, ledger(scratch))


def on_event_gaps(
    logs: dict[str, list[StoredEvent]], delivered: Counter[tuple[str, int, str]]
) -> list[str]:
    """Every line is an event that landed; every event of a finished task reached on_event,
    but those of its finishing append, which a kill may cut off (a finished task is never
    claimed again: ADR-0046) — the events after the plugin's last mark, in the last claim."""
    problems: list[str] = []
    logged = {(task, e.seq): e.type for task, log in logs.items() for e in log}
    for task, seq, kind in delivered:
        if logged.get((task, seq)) != kind:
            problems.append(
                f"{task}: on_event got {kind} at seq {seq}, the log has {logged.get((task, seq))}"
            )
    for task, log in logs.items():
        if task == OUTBOX or not log or log[-1].type != "TaskFinished":
            continue
        marks = [e.seq for e in log if e.type == "PluginRecord"]
        last_mark, last_epoch = (marks[-1] if marks else 0), log[-1].epoch
        for event in log:
            if event.type == "PluginRecord" or (task, event.seq, event.type) in delivered:
                continue
            if not (event.seq > last_mark and event.epoch == last_epoch):
                problems.append(f"{task}: on_event never got {event.type} at seq {event.seq}")
    return problems


def counted(outbox: list[InboxEntry], scratch: Path) -> Counter[str]:
    delivered = ledger(scratch)
    seen: Counter[str] = Counter()
    seen["notifications"] = len(outbox)
    seen["on_event deliveries"] = sum(delivered.values())
    seen["on_event duplicates"] = sum(n - 1 for n in delivered.values())
    return seen
