"""What a worker's plugins decide about a run: the pins it checks before the first step,
and whether its claims may start fresh jobs for it (ADR-0101)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from noeta.core.ports.pin import Pin
from noeta.core.ports.store import JobStarts
from noeta.core.rules import events as ev
from noeta.core.rules.gates import Gate
from noeta.core.rules.next_action import LeavePluginMissing, PinPlugins, check_pins
from noeta.core.runner.plugin_hooks import HookPlugins
from noeta.core.runner.writing import RunWriter
from noeta.core.task import LoadAttempts
from noeta.observability import tracing


async def check(
    run: RunWriter, available: tuple[Pin, ...] | None, load_attempts: LoadAttempts
) -> Literal["finished", "plugin_missing"] | None:
    """The task's pins against the worker's: a new pin rides with the first append; a
    plugin missing leaves the task (or fails it, after LOAD_ATTEMPTS claims)."""
    if available is None:
        return None  # not checked (tests, `noeta run` alone)
    match check_pins(run.state, available):
        case PinPlugins(pins=pins):
            run.pending.append(ev.PluginsPinned(pins))  # lands with the first append
        case LeavePluginMissing(missing=missing):
            names = ", ".join(f"{pin.name} ({pin.source} {pin.version})" for pin in missing)
            error = f"plugin_missing: this worker lacks {names}"
            failed = await run.give_up_loading(error, load_attempts)
            return "finished" if failed else "plugin_missing"
    return None


def claim_starts(
    available: tuple[Pin, ...] | None, gates: Sequence[Gate], hooks: HookPlugins, draining: bool
) -> JobStarts | None:
    """What a claim may start: fresh jobs, whose run's first append would be exactly their
    pin and ToolStarted. None where it might write something else first (a gate's rewrite
    or question, an append hook's records, a live trace's record), where pins are not
    checked, or while the worker drains (its runs start no tool)."""
    if available is None or gates or hooks.before or hooks.after or draining:
        return None
    return None if tracing.enabled() else JobStarts(available)
