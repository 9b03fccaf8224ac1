"""How often the chaos really bit, read back from the task logs and the workers' output,
and the minimum the run must show: each fault kind landed, each recovery path taken,
subagents launched and handed back (one across a takeover, one to a parent that ended
first)."""

from __future__ import annotations

import re
import statistics
from collections import Counter
from datetime import datetime

from noeta.core.ports.store import LateResult, StoredEvent
from noeta.core.runner.model_cuts import NOT_SENT_PREFIX

# Worker log lines (noeta/worker/worker.py); asctime is the local clock.
_TAKEOVER = re.compile(r"^(\S+ \S+) INFO noeta\.worker: took over task (\S+) \(epoch (\d+)\)", re.M)
# Every claim of a task under an epoch, whether or not its run wrote anything after it
# (noeta/worker/claim_lines.py, waiting_claims.py, continuing.py).
_CLAIMED = re.compile(
    r"^(\S+ \S+) INFO noeta\.worker: (?:claimed|took over|adopted|continued with) task "
    r"([^\s,]+)[^(\n]*\(epoch (\d+)",
    re.M,
)
_PATTERNS = {
    "conflicts refused": re.compile(r"conflict on task "),
    "adopted claims (lost claim reply)": re.compile(r"adopted task "),
    "commit-unknowns": re.compile(r"may or may not have landed|outcome is unknown"),
    # noeta/core/runner/grace.py (ADR-0083)
    "graces waited for a live worker's result": re.compile(r"lives on; waiting up to"),
    "graces that ended with no result": re.compile(r"no result for \S+ within the grace"),
}
RECOVERY = {
    "recover": "calls settled by recover",
    "rerun": "calls settled by re-run",
    "unknown": "calls settled as outcome unknown",
}
REQUIRED = (
    "takeovers",
    "conflicts refused",
    "re-sent model requests",
    *RECOVERY.values(),
    "lost background jobs",
    "adopted claims (lost claim reply)",
    "subtasks launched",
    "handbacks taken",
    "handbacks to a finished parent",
    "subtasks across a takeover",
)


def count(logs: dict[str, list[StoredEvent]], output: str) -> Counter[str]:
    seen: Counter[str] = Counter()
    seen["takeovers"] = len(_TAKEOVER.findall(output))
    for what, pattern in _PATTERNS.items():
        seen[what] = len(pattern.findall(output))
    for log in logs.values():
        calls = sum(1 for e in log if e.type == "ModelCalled")
        replies = sum(1 for e in log if e.type in ("ModelReplied", "ModelFailed"))
        seen["re-sent model requests"] += calls - replies
        for event in log:
            data = event.data if isinstance(event.data, dict) else {}
            if event.type == "ToolFinished" and data.get("recovery") in RECOVERY:
                seen[RECOVERY[str(data["recovery"])]] += 1
            seen["lost background jobs"] += event.type == "JobLost"
            seen["background jobs stopped with their claim"] += event.type == "JobStopped"
            seen["wake-ups"] += event.type == "WokenUp"
            seen["subtasks launched"] += event.type == "SubtaskLaunched"
            seen["handbacks taken"] += event.type == "SubtaskReturned"
    return seen + subtasks_seen(logs, output)


def subtasks_seen(logs: dict[str, list[StoredEvent]], output: str) -> Counter[str]:
    """Handbacks a parent never took (it ended first), and subtasks whose life crossed a
    takeover: of the child itself, or of its parent between the launch and the handback."""
    taken_over = [(task, int(epoch)) for _, task, epoch in _TAKEOVER.findall(output)]
    seen: Counter[str] = Counter()
    for parent, log in logs.items():
        returned = {
            str(e.data["child_id"]): e.epoch
            for e in log
            if e.type == "SubtaskReturned" and isinstance(e.data, dict)
        }
        for event in log:
            if event.type != "SubtaskLaunched" or not isinstance(event.data, dict):
                continue
            child = str(event.data["child_id"])
            if child not in returned and log[-1].type == "TaskFinished":
                seen["handbacks to a finished parent"] += 1
            until = returned.get(child, 1 << 62)
            seen["subtasks across a takeover"] += any(
                task == child or (task == parent and event.epoch < epoch <= until)
                for task, epoch in taken_over
            )
    return seen


def takeover_seconds(logs: dict[str, list[StoredEvent]], output: str) -> list[float]:
    """For each takeover: from the last moment the task was known held under an earlier
    epoch to the new claim. That is its last write under one, or a later claim that wrote
    nothing before it was lost: measured from the write alone, a chat task's wait for its
    next message before such a claim counted as takeover time (24.5 s for a takeover that
    came 1.1 s after the lost claim)."""
    claims: dict[str, list[tuple[datetime, int]]] = {}
    for stamp, task, epoch in _CLAIMED.findall(output):
        claims.setdefault(task, []).append((_local(stamp), int(epoch)))
    found = []
    for stamp, task, epoch in _TAKEOVER.findall(output):
        at = _local(stamp)
        before = [e.created_at for e in logs.get(task, []) if 0 < e.epoch < int(epoch)]
        before += [when for when, held in claims.get(task, []) if held < int(epoch) and when <= at]
        if before:
            found.append((at - max(before)).total_seconds())
    return found


def _local(stamp: str) -> datetime:
    """A worker log line's time (asctime: the local clock), comparable with the log's."""
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").astimezone()


def percentiles(values: list[float]) -> str:
    if not values:
        return "none"
    p50 = statistics.median(values)
    return f"p50 {p50:.1f} s, max {max(values):.1f} s ({len(values)} measured)"


def short_of_minimum(
    seen: Counter[str], landed: Counter[str], kinds: list[str], required: tuple[str, ...] = REQUIRED
) -> list[str]:
    missing = [f"fault {kind} never landed" for kind in kinds if not landed[kind]]
    missing += [f"no {what} in the run" for what in required if not seen[what]]
    return missing


# Worker log lines of noeta/core/runner/late_results.py: a result whose claim was gone
# when its tool returned, and that could not be kept (the store out for the whole retry).
_KEEP_GAVE_UP = re.compile(r"task (\S+): the result of (\S+) came after its claim was gone")


def late_result_fates(
    logs: dict[str, list[StoredEvent]], kept: dict[str, list[LateResult]], output: str
) -> Counter[str]:
    """What became of each tool result that came back after its claim was gone (its tool
    returned while its worker lived on, ADR-040/0081): recorded from the kept result by a
    later claimer, recorded as a correction after an "outcome unknown", settled otherwise
    (the tool's recover or a re-run: the tool's own way), settled unknown and never
    corrected, or never kept (the store out through the keep's retries)."""
    fates: Counter[str] = Counter()
    for task_id, results in kept.items():
        log = logs.get(task_id, [])
        for result in results:
            if " " in result.call_id:
                continue  # a model call's word (ADR-0080), not a tool's result
            fates[_fate(result, log)] += 1
    fates["never kept"] = len(_KEEP_GAVE_UP.findall(output))
    return fates


def _fate(result: LateResult, log: list[StoredEvent]) -> str:
    settled = ""
    for event in log:
        data = event.data if isinstance(event.data, dict) else {}
        if data.get("call_id") != result.call_id:
            continue
        if event.type == "ToolResultCorrected":
            return "corrected"
        if event.type == "ToolFinished" and not settled:
            settled = str(data.get("recovery") or "")
    if settled == "late":
        return "recorded late"
    return "settled unknown" if settled == "unknown" else f"settled by {settled or 'its run'}"


def late_result_ratio(fates: Counter[str]) -> str:
    """Of the results that came back late, those that reached the log as the real result
    (recorded late, or as a correction), against those lost (settled unknown, never kept);
    the ones the tool's own recover or re-run settled are shown apart."""
    handed = fates["recorded late"] + fates["corrected"]
    lost = fates["settled unknown"] + fates["never kept"]
    apart = sum(n for fate, n in fates.items() if fate.startswith("settled by"))
    share = f"{100 * handed / (handed + lost):.0f} %" if handed + lost else "n/a"
    return (
        f"{handed} of {handed + lost} reached the log as the real result ({share}): "
        f"{fates['recorded late']} recorded late, {fates['corrected']} corrected, "
        f"{fates['settled unknown']} settled unknown, {fates['never kept']} never kept; "
        f"{apart} more settled by the tool's own recover or re-run"
    )


def infrastructure_failures(logs: dict[str, list[StoredEvent]]) -> list[str]:
    """Tasks that failed, or turns that failed, for the infrastructure (ADR-0080): the run
    fails on any, the model answered every request it got."""
    found = []
    for task_id, log in logs.items():
        for event in log:
            data = event.data if isinstance(event.data, dict) else {}
            error = str(data.get("error") or "")
            if event.type in ("TurnEnded", "TaskFinished") and error.startswith("infrastructure:"):
                found.append(f"{task_id}: {event.type} {error[:160]}")
    return found


def requests_sent_twice_by_one_process(
    logs: dict[str, list[StoredEvent]],
    kept: dict[str, list[LateResult]],
    starts: list[tuple[str, float]],
) -> list[str]:
    """Model requests one worker process sent twice: two `ModelCalled` of one task with
    the same request bytes, written under one worker name within one life of its process
    (between two of its starts, by the wall clock the server shares). A call its worker
    kept word it never sent (ADR-0080) is not counted."""
    found = []
    for task_id, log in logs.items():
        unsent = {r.epoch for r in kept.get(task_id, []) if r.call_id.startswith(NOT_SENT_PREFIX)}
        seen: set[tuple[str, float, object]] = set()
        for event in log:
            data = event.data if isinstance(event.data, dict) else {}
            if event.type != "ModelCalled" or event.owner is None or event.epoch in unsent:
                continue
            at = event.created_at.timestamp()
            lives = [t for name, t in starts if name == event.owner and t <= at]
            key = (event.owner, max(lives, default=0.0), data.get("request_sha256"))
            if key in seen:
                found.append(f"{task_id}: seq {event.seq} by {event.owner}")
            seen.add(key)
    return found
