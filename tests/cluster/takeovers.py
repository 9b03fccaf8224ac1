"""Takeovers no fault explains (issue 26's target: at most 1 % of claims): a claim that
lapsed though the run did nothing to its worker, its task, or every worker at once — the
mark of a worker starving its own renewals (a fresh worker's first claims, a slow loop).

Read from the workers' own logs (`<name>.log`: who claimed which epoch, and when) and the
fault timeline; the window of a lapsed claim runs from a little before it was made to the
takeover, so a fault that kept its worker from claiming cleanly counts too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

_CLAIM = re.compile(
    r"^(\S+ \S+) INFO noeta\.worker: (claimed|took over|adopted) task (\S+) \(epoch (\d+)\)",
    re.M,
)
# Faults that reach every worker (the timeline's own words, tests/cluster/faults.py).
EVERY_WORKER = ("SIGKILL every worker", "pg_terminate_backend", "PostgreSQL")
# A fault this long before a claim can still cut it (a worker reconnecting after a
# restart, a blackhole healed a moment before it claimed).
SLACK_SECONDS = 5.0


@dataclass(frozen=True)
class ClaimLine:
    worker: str
    at: float  # wall-clock seconds
    verb: str
    task: str
    epoch: int


def claims(logs: Iterable[Path]) -> list[ClaimLine]:
    """Every claim, takeover and adoption each worker logged."""
    found = []
    for path in logs:
        for stamp, verb, task, epoch in _CLAIM.findall(path.read_text(errors="replace")):
            at = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").astimezone().timestamp()
            found.append(ClaimLine(path.stem, at, verb, task, int(epoch)))
    return sorted(found, key=lambda line: line.at)


def unexplained(lines: list[ClaimLine], faults: list[tuple[float, str]]) -> list[str]:
    """The takeovers whose lapsed claim no fault explains; `faults` in wall-clock seconds.

    The lapsed claim is the task's latest logged claim of an earlier epoch. A takeover
    whose lapsed claim no worker logged (its reply was lost: the claim-reply fault) is
    explained by that fault, and not counted."""
    found = []
    for taking in (line for line in lines if line.verb == "took over"):
        earlier = [
            line
            for line in lines
            if line.task == taking.task and line.epoch < taking.epoch and line.at <= taking.at
        ]
        if not earlier:
            continue
        lapsed = max(earlier, key=lambda line: line.epoch)
        names = (lapsed.worker, taking.task)
        explained = any(
            lapsed.at - SLACK_SECONDS <= at <= taking.at
            and (what.startswith(EVERY_WORKER) or any(_names(what, name) for name in names))
            for at, what in faults
        )
        if not explained:
            found.append(
                f"{taking.task} epoch {lapsed.epoch} ({lapsed.worker}) taken over by"
                f" {taking.worker} {taking.at - lapsed.at:.1f} s after its claim"
            )
    return found


def _names(what: str, name: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", what) is not None
