"""Named failure points, for deterministic fault tests and operators' drills.

    NOETA_FAILPOINTS="tool.after_started=kill;model.after_called=sleep(500)"

Actions: `kill` (SIGKILL this process), `stop(ms)` (freeze the whole process, as a GC
pause or SIGSTOP would), `pause` (SIGSTOP this process: it stays at the point until sent
SIGCONT, so a test decides what happens meanwhile, with no timing), `sleep(ms)` (delay
only the task that hit the point), `raise(Name)` (raise ConnectionError, RuntimeError or
a noeta store error by name). `action@N` fires on the N-th hit only. Unset, every point
is one dictionary lookup on an empty dict. Points: worker.claim_loop (each turn of a
worker's claim loop: `sleep` freezes that loop alone, for /livez), claim.after_commit (an
idle worker then commits its claim alone, not with its run's first write), claim.held (an
idle claim held open for its run's first write, ADR-0136, before that run starts),
append.before_commit, append.after_commit, append_and_claim.after_commit (a canvas
member's finish that claimed its canvas, ADR-0121), cron.after_fire (the scheduler, after each
slot it handles), run.after_create (`noeta run`, between creating its task and claiming
it), model.after_called, model.after_reply (the reply came, not yet recorded),
tool.after_started, tool.before_finished, tool.grace_wait (a claimer about to wait for a
half-done call's result, ADR-0083), subtask.before_launch, subtask.after_launch,
subtask.before_handback_taken, subtask.before_finish, subtask.after_finish (a child's
finishing append), canvas.before_launch, canvas.before_ends_taken (ADR-0104),
hooks.before_on_event, hooks.before_wait, bulk.after_batch (a bulk retry or cancel, after
each batch and its progress).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from dataclasses import dataclass

from noeta.core import errors

ENV = "NOETA_FAILPOINTS"
_ACTION = re.compile(r"^(kill|pause|stop|sleep|raise)(?:\((\w+)\))?(?:@(\d+))?$")
_RAISABLE: dict[str, type[BaseException]] = {
    "ConnectionError": ConnectionError,
    "RuntimeError": RuntimeError,
    "StoreUnavailable": errors.StoreUnavailable,
    "CommitUnknown": errors.CommitUnknown,
}


@dataclass
class Failpoint:
    action: str
    argument: str
    on_hit: int  # 0: every hit
    hits: int = 0


def parse(text: str) -> dict[str, Failpoint]:
    points: dict[str, Failpoint] = {}
    for item in filter(None, (part.strip() for part in text.split(";"))):
        name, _, spec = item.partition("=")
        match = _ACTION.match(spec.strip())
        if not name.strip() or match is None:
            raise errors.ConfigError(f"{ENV}: cannot read {item!r} (e.g. tool.after_started=kill)")
        action, argument, on_hit = match[1], match[2] or "", int(match[3] or 0)
        if action in ("stop", "sleep") and not argument.isdigit():
            raise errors.ConfigError(f"{ENV}: {action} takes milliseconds, e.g. {action}(500)")
        if action == "raise" and argument not in _RAISABLE:
            raise errors.ConfigError(f"{ENV}: raise takes one of {', '.join(_RAISABLE)}")
        points[name.strip()] = Failpoint(action, argument, on_hit)
    return points


_POINTS = parse(os.environ.get(ENV, ""))


def armed(*names: str) -> bool:
    """Whether any of the failure points `names` is configured (a test or drill asks)."""
    return any(name in _POINTS for name in names)


async def hit(name: str) -> None:
    """Act on the failure point `name`, if one is configured for it."""
    if not _POINTS:
        return
    point = _POINTS.get(name)
    if point is None:
        return
    point.hits += 1
    if point.on_hit and point.hits != point.on_hit:
        return
    if point.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif point.action == "pause":
        os.kill(os.getpid(), signal.SIGSTOP)  # returns once the process is continued
    elif point.action == "stop":
        time.sleep(int(point.argument) / 1000)  # noqa: ASYNC251 - a frozen process, on purpose
    elif point.action == "sleep":
        await asyncio.sleep(int(point.argument) / 1000)
    else:
        raise _RAISABLE[point.argument](f"failpoint {name}")
