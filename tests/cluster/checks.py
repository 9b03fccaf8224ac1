"""The checks after the heal phase: statuses, side effects against the ledger, messages
taken once, the log invariants of every task, every log replayed with this code (issue
30), subagent trees (tree_checks.py), canvases (canvases.py), the notify plugin's
deliveries (hook_checks.py), and every acknowledged append durable."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from noeta.core.ports.store import InboxEntry, Store, StoredEvent, TaskStatus
from noeta.core.rules.replay import replay
from tests.cluster import canvases
from tests.cluster.canvases import PLAIN
from tests.cluster.fanout import CANCELLED_PARENT, OUTBOX
from tests.cluster.hook_checks import check_notifications
from tests.cluster.invariants import check_log
from tests.cluster.tree_checks import allowed_statuses, check_trees, parent_of, worktrees_left
from tests.cluster.workload import Workload

SIDE_EFFECTS = ("Bash", "Record")


async def check(store: Store, workload: Workload, scratch: Path) -> list[str]:
    problems: list[str] = []
    ledger = Counter((scratch / "ledger").read_text().split())
    problems += [f"marker {marker} recorded {n} times" for marker, n in ledger.items() if n > 1]
    logs: dict[str, list[StoredEvent]] = {}
    inboxes: dict[str, list[InboxEntry]] = {}
    records = await store.list_tasks(limit=10_000)
    statuses = {record.id: record.status for record in records}
    for record in records:
        task_id, kind = record.id, workload.kinds.get(record.id)
        log = logs[task_id] = await store.read_log(task_id)
        inbox = inboxes[task_id] = await store.read_inbox(task_id, untaken_only=False)
        if task_id == OUTBOX:
            continue  # never claimed: it only collects notifications
        allowed = expected_statuses(kind, parent_of(log) is not None, task_id, statuses)
        if record.status not in allowed and not canvases.is_member(log):  # check_canvases
            wanted = " or ".join(sorted(status.value for status in allowed))
            problems.append(f"{task_id}: ended {record.status.value}, not {wanted}")
        problems += [f"{task_id}: {problem}" for problem in check_log(log, inbox)]
        parted = replay(log)  # issue 30: logs written under faults replay with this code
        if parted is not None:
            problems.append(f"{task_id}: replay parts from this code at {parted}")
        problems += [f"{task_id}: {problem}" for problem in side_effects(log, ledger, task_id)]
        if kind == "chat":
            keys = {entry.id: entry.dedupe_key for entry in inbox}
            taken = Counter(
                keys.get(int(_data(e)["inbox_id"])) for e in log if e.type == "MessageTaken"
            )
            for sent_to, key in workload.sent:
                if sent_to == task_id and taken[key] != 1:
                    problems.append(f"{task_id}: message {key} taken {taken[key]} times")
    problems += check_trees(logs, inboxes, statuses)
    problems += canvases.check_canvases(workload.kinds, logs, statuses, ledger)
    problems += worktrees_left(workload.workspaces, workload.in_git & set(logs), logs)
    # The plain jobs' worker loads no notify plugin (hooks keep a claim from starting a job).
    hooked = {task: log for task, log in logs.items() if workload.kinds.get(task) != PLAIN}
    problems += check_notifications(hooked, inboxes.get(OUTBOX, []), scratch)
    return problems + journaled_appends_missing(scratch, logs)


def expected_statuses(
    kind: str | None, is_subtask: bool, task_id: str, statuses: dict[str, TaskStatus]
) -> set[TaskStatus]:
    if kind == "chat":
        return {TaskStatus.CANCELLED}
    if kind == CANCELLED_PARENT:  # done only if its subagents beat the cancel
        return {TaskStatus.CANCELLED, TaskStatus.DONE}
    if kind in (*canvases.KINDS, canvases.PLAIN):  # failed only as check_canvases allows
        return {TaskStatus.DONE, TaskStatus.FAILED}
    if is_subtask:
        return allowed_statuses(task_id, statuses)
    return {TaskStatus.DONE}


def _data(event: StoredEvent) -> dict[str, object]:
    return event.data if isinstance(event.data, dict) else {}


def side_effects(log: list[StoredEvent], ledger: Counter[str], task_id: str) -> list[str]:
    """Each side-effect call the log shows as done wrote its marker exactly once; a
    background job's marker is written by the job, so it is checked when the log shows it
    finished. (A call whose outcome is unknown may have written it, at most once.)"""
    problems = []
    names = {_data(e)["call_id"]: _data(e)["name"] for e in log if e.type == "ToolStarted"}
    jobs = {_data(e)["job_id"] for e in log if e.type == "JobStarted"}
    for event in log:
        data = _data(event)
        if event.type == "ToolFinished":
            call = data["call_id"]
            done = not data["is_error"] and data.get("recovery") != "unknown"
            if data["is_error"] and not data.get("recovery") and names.get(call) in SIDE_EFFECTS:
                problems.append(f"{task_id}:{call} failed: {str(data.get('content'))[:120]!r}")
            if done and names.get(call) in SIDE_EFFECTS and call not in jobs:
                marker = f"{task_id}:{call}"
                if ledger[marker] != 1:
                    problems.append(f"{marker} is done in the log, {ledger[marker]}x in the ledger")
        elif event.type == "JobFinished" and data.get("exit_code") == 0:
            marker = f"{task_id}:{data['job_id']}"
            if ledger[marker] != 1:
                problems.append(f"job {marker} finished, {ledger[marker]}x in the ledger")
    return problems


def journaled_appends_missing(scratch: Path, logs: dict[str, list[StoredEvent]]) -> list[str]:
    """Every append a store acknowledged to a worker (its journal) is in the log: the
    same events at the same seqs, under the same claim, restarts or not."""
    problems = []
    for journal in sorted(scratch.glob("journal-*")):
        for line in journal.read_text().splitlines():
            entry = json.loads(line)
            by_seq = {event.seq: event for event in logs.get(entry["task"], [])}
            for offset, kind in enumerate(entry["types"]):
                seq = entry["first_seq"] + offset
                event = by_seq.get(seq)
                found = (event.type, event.epoch, event.owner) if event else None
                if found != (kind, entry["epoch"], entry["worker"]):
                    problems.append(
                        f"{entry['task']}: acknowledged {kind} at seq {seq} (epoch "
                        f"{entry['epoch']}, {entry['worker']}) is {found or 'missing'} in the log"
                    )
    return problems
