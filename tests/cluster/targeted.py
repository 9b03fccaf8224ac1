"""Scenarios that force the windows random chaos rarely hits, run before the chaos.

The fence's window: the old owner claims the task and goes quiet, its lease lapses, a
real worker takes over and is held before its first write (a pause failpoint), and the
old owner appends. The expected seq is still right and no (task, seq) is taken, so only
the epoch check refuses it. The stale view: a client whose view of the log is
ahead of it (it took an append whose outcome was unknown for landed) appends at the
wrong seq, alone and then twice in one turn (one group commit's batch); only the
expected-seq checks refuse them, as no key collides.
And one run of each recovery path, so a short run shows them all: a worker killed inside
a tool call (failpoint) whose next claimer settles it by recover (Record), by re-run
(Pause) or as outcome unknown (Bash), the recovering claim's reply lost (adopted), and a
worker killed while its background job runs (the job is recorded lost), and a worker
killed after its model reply came, before it could record or keep it (the one request no
hand-over spares: its next claimer sends it again). And the subagent
paths: a parent's worker killed right after a launch (its next claimer takes the parent
over while the subagents work), and a parent cancelled while its subagents work (their
handbacks land in a finished inbox; each removes its own worktree).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from noeta.core.errors import Conflict
from noeta.core.ports.store import Claim, NewEvent
from tests.cluster.processes import LEASE, Cluster
from tests.cluster.workload import Workload

QUEUE = "targeted"
# It stops itself (SIGSTOP) at its point until the scenario sends SIGCONT: the order is
# decided by process states, not by how fast processes start on a loaded machine.
NEW_HELD = "append.before_commit=pause@1"  # its first write, after the takeover
# A bound for what waits on a worker's start (python, imports, the sandbox's checks, the
# warm-up): only a hang should reach it. 30 s was reached at load 20 by a start alone.
STARTS_WITHIN = 120.0
# A bound for a scenario's task to finish once its heir runs (mutant runs use less: a
# mutant's task may never finish, and what catches it is what its log shows).
FINISHES_WITHIN = float(os.environ.get("NOETA_CLUSTER_SCENARIO_WITHIN") or 60)


class ScenarioFailed(Exception):
    """A targeted scenario saw what must never happen (reported as a problem of the run)."""


async def until(check: Callable[[], Awaitable[bool]], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"targeted scenario: {what} within {within:g} s")
        await asyncio.sleep(0.1)


KILLED_IN_TOOL = "tool.before_finished=kill@1"
CLAIM_REPLY_LOST = "claim.after_commit=raise(CommitUnknown)@1"


async def run_targeted(cluster: Cluster, workload: Workload) -> None:
    await fence_window(cluster, workload)
    await stale_view(cluster, workload)
    for path in ("recover", "rerun", "unknown"):
        await killed_in_a_tool(cluster, workload, path)
    await job_lost(cluster, workload)
    await killed_after_the_reply(cluster, workload)
    await subtask_takeover(cluster, workload)
    await cancelled_mid_fanout(cluster, workload)


KILLED_AFTER_LAUNCH = "subtask.after_launch=kill@1"


async def subtask_takeover(cluster: Cluster, workload: Workload) -> None:
    task = "fanout-000"
    workload.in_git.add(task)
    await crash_then_heir(
        cluster,
        workload,
        Crash(task, "agents", KILLED_AFTER_LAUNCH, "killed right after launching a subagent"),
        finished=lambda: _tree_finished(cluster, task),
        within=90,
    )


async def cancelled_mid_fanout(cluster: Cluster, workload: Workload) -> None:
    task = "cancelfanout-000"
    workload.kinds[task] = "cancelled-agents"
    workload.in_git.add(task)
    await workload.create(task, queue=QUEUE)
    cluster.start_worker("fanout-owner", queues=QUEUE)
    await until(lambda: _cancel_sent(workload, task), STARTS_WITHIN, f"{task} launches a subagent")
    cluster.note(f"{task}: cancelled while its subagents work")
    await until(lambda: _tree_finished(cluster, task), 90, f"{task} and its subagents finish")
    cluster.kill(cluster.workers.pop("fanout-owner"))


async def _cancel_sent(workload: Workload, task: str) -> bool:
    await workload.cancel_launched()
    return task in workload.cancelled


async def _tree_finished(cluster: Cluster, root: str) -> bool:
    records = await cluster.store.list_tasks(limit=10_000)
    tree = [r for r in records if r.id == root or r.id.startswith(f"{root}.")]
    return bool(tree) and all(r.status.finished for r in tree)


@dataclass(frozen=True)
class Crash:
    """A worker that dies at a failpoint inside one task, for its heir to finish."""

    task: str
    kind: str  # the workload's kind of task
    failpoint: str
    where: str  # the note's words: "killed ..."


async def crash_then_heir(
    cluster: Cluster,
    workload: Workload,
    crash: Crash,
    *,
    heir_failpoints: str = "",
    finished: Callable[[], Awaitable[bool]] | None = None,
    within: float = FINISHES_WITHIN,
) -> None:
    """Create the task, run it on a worker that kills itself at the failpoint, then start
    an heir and wait until the task (or what `finished` names) is done."""
    task = crash.task
    workload.kinds[task] = crash.kind
    await workload.create(task, queue=QUEUE)
    cluster.start_worker(f"{task}-crash", queues=QUEUE, failpoints=crash.failpoint)
    crashing = cluster.workers.pop(f"{task}-crash")
    await asyncio.to_thread(crashing.wait, 60)
    cluster.note(f"{task}: worker {crash.where} (failpoint)")
    cluster.start_worker(f"{task}-heir", queues=QUEUE, failpoints=heir_failpoints)
    done = finished or (lambda: _finished(cluster, task))
    await until(done, within, f"{task} finishes")
    cluster.kill(cluster.workers.pop(f"{task}-heir"))


async def killed_in_a_tool(cluster: Cluster, workload: Workload, path: str) -> None:
    crash = Crash(f"{path}-000", path, KILLED_IN_TOOL, "killed inside its tool call")
    # The recovering worker's claim reply is lost: it must adopt the task to run it.
    lost = CLAIM_REPLY_LOST if path == "recover" else ""
    await crash_then_heir(cluster, workload, crash, heir_failpoints=lost)


KILLED_AFTER_REPLY = "model.after_reply=kill@1"


async def killed_after_the_reply(cluster: Cluster, workload: Workload) -> None:
    # Random chaos rarely lands here now: a reply whose append is cut is kept and handed
    # over (ADR-0082), so the re-send path needs its own run.
    crash = Crash("resend-000", "tools", KILLED_AFTER_REPLY, "killed after its model reply came")
    await crash_then_heir(cluster, workload, crash)


async def job_lost(cluster: Cluster, workload: Workload) -> None:
    store, task = cluster.store, "lostjob-000"
    workload.kinds[task] = "job"

    async def job_started() -> bool:
        return any(e.type == "JobStarted" for e in await store.read_log(task))

    await workload.create(task, queue=QUEUE)
    cluster.start_worker("job-owner", queues=QUEUE)
    await until(job_started, STARTS_WITHIN, "the background job starts")
    cluster.kill(cluster.workers.pop("job-owner"))
    cluster.note(f"{task}: worker SIGKILLed while its job runs")
    cluster.start_worker("job-heir", queues=QUEUE)
    await until(lambda: _finished(cluster, task), FINISHES_WITHIN, f"{task} finishes")
    cluster.kill(cluster.workers.pop("job-heir"))


async def fence_window(cluster: Cluster, workload: Workload) -> None:
    """The old owner is a client of the store that claims the task and then goes quiet,
    as a frozen worker would; a real worker takes over and is held before its first
    write; then the old owner appends at the right seq under its old epoch. (A frozen
    real worker wakes to a renewal round that may find its claim lost and cancel the
    append before it is sent: the window would be missed, not decided by the fence.)"""
    store, task = cluster.store, "fence-000"
    workload.kinds[task] = "tools"

    async def owner_is(name: str) -> bool:
        record = await store.get_task(task)
        return record is not None and record.owner == name

    await workload.create(task, queue=QUEUE)
    old = await store.claim("fence-old", [QUEUE], LEASE)
    assert old is not None and old.task_id == task
    cluster.note("fence window: fence-old claimed the task and went quiet")
    cluster.start_worker("fence-new", queues=QUEUE, failpoints=NEW_HELD)
    new = cluster.workers["fence-new"]
    await until(lambda: owner_is("fence-new"), STARTS_WITHIN, "fence-new takes the task over")
    await until(lambda: _paused(new), STARTS_WITHIN, "fence-new is held before its first write")
    cluster.note("fence window: fence-new took over, held before its first write")
    record = await store.get_task(task)
    assert record is not None
    try:  # the right seq, no (task, seq) taken: only the epoch check can refuse it
        await _stale_appends(cluster, old, record.last_seq)
    finally:
        new.send_signal(signal.SIGCONT)
    await until(lambda: _finished(cluster, task), FINISHES_WITHIN, "the fence task finishes")
    cluster.kill(cluster.workers.pop("fence-new"))


async def _stale_appends(cluster: Cluster, old: Claim, seq: int) -> None:
    """The old owner's append, sent alone (noeta_fence), then twice in one turn of the
    loop, which go as the rows of one group commit's batch (noeta_append_batch, ADR-0086,
    ADR-0125: writes of one turn share a batch, so the lone one must come by itself):
    each path's epoch check must refuse it."""

    def stale() -> Awaitable[int]:
        return cluster.store.append(old, seq, [NewEvent("ModelCalled", {})])

    outcomes: list[object] = list(await asyncio.gather(stale(), return_exceptions=True))
    outcomes += await asyncio.gather(stale(), stale(), return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException) and not isinstance(outcome, Conflict):
            raise outcome
        if not isinstance(outcome, Conflict):
            cluster.note("fence window: fence-old's append under the old epoch LANDED")
            raise ScenarioFailed(
                "targeted scenario: a stale owner's append landed after a takeover"
            )
        cluster.note("fence window: fence-old's append under the old epoch was refused")
        # Counted with the workers' refusals (counters.py reads every *.log here).
        with (cluster.scratch / "fence-old.log").open("a") as output:
            output.write(f"conflict on task {old.task_id}: {outcome.reason} (fence window)\n")


async def _paused(process: subprocess.Popen[bytes]) -> bool:
    """Stopped by its `pause` failpoint (Linux's process state, read from /proc)."""
    stat = await asyncio.to_thread(Path(f"/proc/{process.pid}/stat").read_text)
    return stat.rpartition(")")[2].split()[0] == "T"


async def stale_view(cluster: Cluster, workload: Workload) -> None:
    store, task = cluster.store, "stale-000"
    workload.kinds[task] = "tools"
    await workload.create(task, queue=QUEUE)
    claim = await store.claim("stale-client", [QUEUE], 30.0)
    assert claim is not None and claim.task_id == task
    # The log ends at 1. Sent alone (noeta_fence), then two in one turn of the loop, which
    # go as the rows of one batch (noeta_append_batch): each path's seq check must refuse.
    for seqs in ((2,), (2, 5)):
        appends = (store.append(claim, seq, [NewEvent("ModelCalled", {})]) for seq in seqs)
        for outcome in await asyncio.gather(*appends, return_exceptions=True):
            if isinstance(outcome, Conflict):
                cluster.note("stale view: an append at the wrong seq was refused")
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                cluster.note("stale view: an append at the wrong seq landed")
    await store.release(claim)
    cluster.start_worker("stale-finisher", queues=QUEUE)
    await until(lambda: _finished(cluster, task), FINISHES_WITHIN, "the stale-view task finishes")
    cluster.kill(cluster.workers.pop("stale-finisher"))


async def _finished(cluster: Cluster, task: str) -> bool:
    record = await cluster.store.get_task(task)
    return record is not None and record.status.finished
