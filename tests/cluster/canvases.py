"""The cluster's canvases (ADR-0104): chords whose callback gets every member's result,
and chains whose last link gets what the links before it made, submitted as a client
would, run under the chaos; and their checks: each callback ran once (the ledger's
marker) with exactly the value it should have received, each member's end taken once,
the canvas's result the callback's."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from noeta.client.canvas import Canvas, canvas_task, chain, chord, group
from noeta.client.job_tasks import JOB_CALL_ID, job_task
from noeta.core.ports.store import DEFAULT_QUEUE, NewTask, StoredEvent, TaskStatus
from noeta.core.rules.canvas import leaves
from tests.cluster.canvas_jobs import cluster_add as add
from tests.cluster.canvas_jobs import cluster_collect as collect

KINDS = ("chord", "chain")
# A plain job of its own (no canvas), on a worker without hooks, so that its claim starts
# it (ADR-0101); its collect a side effect checked against the ledger as a callback's is.
PLAIN = "plain"  # their queue's name too, served by a worker of its own
PLAIN_CONFIG = "noeta-plain.yaml"
CHORD_MEMBERS = 6
PLUGIN = {"module": "tests.cluster.canvas_jobs"}


def planned(kind: str, task_id: str) -> tuple[Canvas, Any]:
    """The canvas of a task of this kind, and what its callback must receive."""
    n = _number(task_id)
    if kind == "chord":
        header = group(add.s(i, n) for i in range(CHORD_MEMBERS))  # type: ignore[attr-defined]
        return chord(header, collect.s()), [i + n for i in range(CHORD_MEMBERS)]  # type: ignore[attr-defined]
    links = (add.s(n, 1), add.s(2), add.s(3), collect.s())  # type: ignore[attr-defined]
    return chain(*links), n + 6


def new_task(kind: str, task_id: str, config: Path) -> NewTask:
    if kind == PLAIN:
        return job_task(task_id, collect, {"received": _number(task_id)}, PLAIN, None)  # type: ignore[arg-type]
    canvas, _ = planned(kind, task_id)
    return canvas_task(canvas, task_id, DEFAULT_QUEUE, str(config))


def _number(task_id: str) -> int:
    return int(task_id.rsplit("-", 1)[1])


def _data(event: StoredEvent) -> dict[str, Any]:
    return event.data if isinstance(event.data, dict) else {}


def members(log: list[StoredEvent]) -> list[str]:
    """The member ids of a canvas, in tree order (whether launched or not)."""
    spec = _data(log[1]).get("spec", {}) if len(log) > 1 else {}
    count = sum(1 for _ in leaves(spec.get("tree") or {}))
    return [f"{log[0].task_id}.m{n}.1" for n in range(count)]


def check_canvases(
    kinds: Mapping[str, str],
    logs: Mapping[str, list[StoredEvent]],
    statuses: Mapping[str, TaskStatus],
    ledger: Counter[str],
) -> list[str]:
    problems: list[str] = []
    for task_id, kind in kinds.items():
        if kind in KINDS and task_id in logs:
            problems += [f"{task_id}: {p}" for p in _check(kind, task_id, logs, statuses, ledger)]
        elif kind == PLAIN and task_id in logs:
            problems += [f"{task_id}: {p}" for p in _check_plain(task_id, logs, statuses, ledger)]
    return problems


def _check_plain(
    task_id: str,
    logs: Mapping[str, list[StoredEvent]],
    statuses: Mapping[str, TaskStatus],
    ledger: Counter[str],
) -> list[str]:
    """A plain job is its own collect: checked as a canvas's callback is."""
    log = logs[task_id]
    return _collected(task_id, _number(task_id), log, log, statuses.get(task_id), ledger)


def _check(
    kind: str,
    task_id: str,
    logs: Mapping[str, list[StoredEvent]],
    statuses: Mapping[str, TaskStatus],
    ledger: Counter[str],
) -> list[str]:
    _, expected = planned(kind, task_id)
    log = logs[task_id]
    ids = members(log)
    callback = ids[-1]
    status = statuses.get(task_id)
    problems = _collected(callback, expected, log, logs.get(callback, []), status, ledger)
    returned = Counter(_data(e)["child_id"] for e in log if e.type == "SubtaskReturned")
    problems += [f"{child}'s end taken {n} times" for child, n in returned.items() if n > 1]
    if status is TaskStatus.DONE:
        if set(returned) != set(ids):
            problems.append(f"took the ends of {sorted(returned)}, not every member's")
        problems += [
            f"{m}: ended {statuses.get(m)}" for m in ids if statuses.get(m) is not TaskStatus.DONE
        ]
    return problems


def _collected(
    callback: str,
    expected: Any,
    log: list[StoredEvent],
    callback_log: list[StoredEvent],
    status: TaskStatus | None,
    ledger: Counter[str],
) -> list[str]:
    """What a collect (`callback`: a canvas's last member, or a plain job itself) must
    show: it ran only with `expected`, at most once; the task (`log`) done: its result
    `expected` and the collect ran once; failed: only with the collect's outcome unknown."""
    marker = f"{callback}:{JOB_CALL_ID}={json.dumps(expected, separators=(',', ':'))}"
    ran = [line for line in ledger.elements() if line.startswith(f"{callback}:{JOB_CALL_ID}=")]
    problems = [f"the callback ran with {line}, not {marker}" for line in ran if line != marker]
    if len(ran) > 1:
        problems.append(f"the callback ran {len(ran)} times")
    if status is TaskStatus.DONE:
        answer = json.loads(str(_data(log[-1]).get("answer")))
        if answer != expected:
            problems.append(f"its result is {answer!r}, not {expected!r}")
        if len(ran) != 1:
            problems.append(f"done, and its callback ran {len(ran)} times")
    elif status is TaskStatus.FAILED and not _outcome_unknown(callback_log):
        problems.append(f"failed ({_data(log[-1]).get('error')}), its callback never in doubt")
    elif status not in (TaskStatus.DONE, TaskStatus.FAILED):
        problems.append(f"ended {status}")
    return problems


def _outcome_unknown(log: list[StoredEvent]) -> bool:
    """The callback's run was cut by a crash before its marker was written: its recover
    found nothing, so its outcome is unknown and the canvas fails (SPEC §4)."""
    return any(e.type == "ToolFinished" and _data(e).get("recovery") == "unknown" for e in log)


def is_member(log: list[StoredEvent]) -> bool:
    """A canvas member: a job whose SubtaskOf comes after its pin (ADR-0104)."""
    return len(log) > 3 and log[3].type == "SubtaskOf"
