"""A claim that starts the fresh plain jobs it takes (`JobStarts`, ADR-0101): the events it
writes, as both stores need them (PostgreSQL in its claim statement, sqlite in Python)."""

from __future__ import annotations

import functools

from noeta.core.ports import payload
from noeta.core.ports.pin import Pin
from noeta.core.ports.store import JobStarts, LoadedTask, NewEvent
from noeta.core.rules import events as ev


def pinned_data(starts: JobStarts) -> str:
    """The claimer's `PluginsPinned` data, encoded as its own append would store it."""
    return _claim_parameters(starts.pins)[0]


def pin_names(starts: JobStarts) -> list[str]:
    """The claimer's plugin names, sorted, each once (as `needs` holds them)."""
    return list(_claim_parameters(starts.pins)[1])


@functools.lru_cache(maxsize=8)
def _claim_parameters(pins: tuple[Pin, ...]) -> tuple[str, tuple[str, ...]]:
    """Both, made once per set of pins: a worker's are fixed for its life, and encoding
    them at every claim cost an idle worker's pickup about 60 µs before its claim was
    sent (cold; 4 µs warm). Pins are frozen: equal pins, equal parameters."""
    return payload.encode(ev.encode(ev.PluginsPinned(pins))[1]), tuple(
        sorted({pin.name for pin in pins})
    )


def start_events(loaded: LoadedTask, starts: JobStarts) -> list[NewEvent] | None:
    """What the claimer's run would append first to this fresh job (its pin where the
    job's differs, then its ToolStarted); None where the task is not one to start."""
    if loaded.snapshot is not None or loaded.inbox or loaded.after_seq is not None:
        return None
    try:
        logged = [ev.decode(event.type, event.data) for event in loaded.events]
    except ValueError:
        return None  # the runner says why, as for any unreadable log
    if len(logged) == 4 and isinstance(logged[3], ev.SubtaskOf):
        if not isinstance(logged[2], ev.PluginsPinned):
            return None
        logged = logged[:3]  # a canvas member: its link to its canvas comes last (ADR-0104)
    if len(logged) not in (2, 3) or not isinstance(logged[0], ev.TaskCreated):
        return None
    call = logged[1]
    if not isinstance(call, ev.CallRequested):
        return None
    new: list[ev.Event] = []
    if len(logged) == 3:
        pinned = logged[2]
        if not isinstance(pinned, ev.PluginsPinned):
            return None
        names = set(pin_names(starts))
        if any(pin.name not in names for pin in pinned.pins):
            return None  # the run leaves it (plugin_missing): nothing is written
        if pinned.pins != starts.pins:
            new.append(ev.PluginsPinned(starts.pins))
    else:
        new.append(ev.PluginsPinned(starts.pins))
    new.append(ev.ToolStarted(call.call_id, call.name, call.input))
    return [NewEvent(*ev.encode(event)) for event in new]
