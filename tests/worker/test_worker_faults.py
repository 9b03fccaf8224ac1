"""`noeta worker` processes under real faults: SIGKILL, SIGSTOP, SIGTERM, a lost claim reply.

Each row of SPEC §3 that these reach is named in its test.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from noeta.core.ports.store import Store

from .conftest import (
    REPLACED,
    WorkerProcess,
    add_task,
    an_append_waiting_on_its_row,
    lapse_the_lease,
    log_types,
    status_of,
    until,
    workspace_of,
)

# Never lapses during a test: a worker that is killed or frozen keeps its claim until the
# test lapses its lease (lapse_the_lease), not until a short lease races its steps.
LONG_LEASE = 600
SLEEPY = {"tool_calls": [{"id": "c1", "name": "Bash", "input": {"command": "sleep 3; echo slept"}}]}


async def test_workers_run_many_tasks_and_exit_cleanly_on_sigterm(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    for n in range(20):
        await add_task(store, tmp_path, f"t{n}", {"text": f"answer {n}"})
    a, b = workers(postgres_url, "a"), workers(postgres_url, "b")

    async def all_done() -> bool:
        return all([await status_of(store, f"t{n}") == "done" for n in range(20)])

    await until(all_done, "every task is done")

    async def both_up() -> bool:
        return "worker a:" in a.log() and "worker b:" in b.log()

    await until(both_up, "both workers are up")
    for worker in (a, b):
        worker.signal(signal.SIGTERM)
    assert [await a.exit_code(), await b.exit_code()] == [0, 0]
    claimed = a.log().count("claimed task") + b.log().count("claimed task")
    assert claimed == 20  # each task claimed once: no double runs


async def test_a_worker_killed_mid_model_call_is_taken_over(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    await add_task(store, tmp_path, "t", {"text": "made it"})
    doomed = workers(postgres_url, "doomed", lease=LONG_LEASE, failpoints="model.after_called=kill")
    assert await doomed.exit_code() == -signal.SIGKILL
    assert await log_types(store, "t") == ["TaskCreated", "PluginsPinned", "ModelCalled"]
    assert await lapse_the_lease(postgres_url, "t") == 1
    workers(postgres_url, "heir", lease=LONG_LEASE)

    async def done() -> bool:
        return await status_of(store, "t") == "done"

    await until(done, "the heir finishes the task")
    log = await store.read_log("t")
    hashes = [e.data["request_sha256"] for e in log if e.type == "ModelCalled"]  # type: ignore[index]
    assert len(hashes) == 2 and hashes[0] == hashes[1]  # the same request, re-sent
    assert (await store.get_task("t")).owner_epoch == 2  # type: ignore[union-attr]


async def test_a_frozen_worker_wakes_to_find_its_claim_gone_and_writes_nothing(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    # SPEC §3: renew returns nothing / append raises Conflict -> stop, write nothing more.
    await add_task(store, tmp_path, "t", SLEEPY, {"text": "done"})
    frozen = workers(postgres_url, "frozen", lease=LONG_LEASE)

    async def tool_started() -> bool:
        return "ToolStarted" in await log_types(store, "t")

    await until(tool_started, "the tool starts")
    frozen.signal(signal.SIGSTOP)
    await until(frozen.paused, "the worker is frozen")
    assert await lapse_the_lease(postgres_url, "t") == 1  # while it cannot renew
    workers(postgres_url, "rescuer", lease=LONG_LEASE)

    async def done() -> bool:
        return await status_of(store, "t") == "done"

    await until(done, "the rescuer finishes the task")
    frozen.signal(signal.SIGCONT)

    async def noticed() -> bool:
        text = frozen.log()
        return "conflict on task t" in text or "task t: claim lost" in text

    await until(noticed, "the frozen worker notices it lost the claim")
    types = await log_types(store, "t")
    assert types.count("ToolFinished") == 1  # the woken worker's result never landed
    finished = [e.data for e in await store.read_log("t") if e.type == "ToolFinished"]
    assert finished[0]["recovery"] == "unknown"  # type: ignore[index]


async def test_sigterm_with_no_grace_hands_running_tasks_back_at_once(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    long_sleep = {"tool_calls": [{"id": "c1", "name": "Bash", "input": {"command": "sleep 60"}}]}
    await add_task(store, tmp_path, "t", long_sleep, {"text": "done"})
    first = workers(postgres_url, "first", lease=30, grace=0)

    async def tool_started() -> bool:
        return "ToolStarted" in await log_types(store, "t")

    await until(tool_started, "the tool starts")
    first.signal(signal.SIGTERM)
    assert await first.exit_code(within=20) == 0
    assert await status_of(store, "t") == "ready"  # released, not left to a 30 s lease
    assert "handed back task t (its step cut off)" in first.log()
    workers(postgres_url, "second", lease=30)

    async def done() -> bool:
        return await status_of(store, "t") == "done"

    await until(done, "another worker finishes it", within=20)


async def test_a_lost_claim_reply_is_adopted_not_waited_out(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    # SPEC §3: CommitUnknown during claim -> adopt the tasks the store records as ours.
    await add_task(store, tmp_path, "t", {"text": "adopted"})
    # Waited out, the lease would keep the task for ten minutes, and a claim after it would
    # be epoch 2: the test waits for the task, not against the lease.
    worker = workers(
        postgres_url, "w", lease=600, failpoints="claim.after_commit=raise(CommitUnknown)@1"
    )

    async def done() -> bool:
        return await status_of(store, "t") == "done"

    await until(done, "the worker adopts and finishes the task", within=120)
    assert "adopted task t (epoch 1)" in worker.log()
    assert (await store.get_task("t")).owner_epoch == 1  # type: ignore[union-attr]


async def test_an_idle_worker_is_woken_by_a_new_task_not_by_its_poll(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    worker = workers(postgres_url, "listener", poll=120)

    async def idle() -> bool:
        return "listening for wake-ups" in worker.log()

    await until(idle, "the worker is up and idle")
    await add_task(store, tmp_path, "t", {"text": "heard you"})

    async def done() -> bool:
        return await status_of(store, "t") == "done"

    # Well inside the 120 s poll: only the wake-up can have started it.
    await until(done, "the woken worker finishes the task", within=20)


async def test_a_worker_killed_mid_tool_call_is_taken_over_and_nothing_runs_twice(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    marker = workspace_of(tmp_path, "t") / "ran"
    touch = {"tool_calls": [{"id": "c1", "name": "Bash", "input": {"command": "echo once >> ran"}}]}
    await add_task(store, tmp_path, "t", touch, {"text": "done"})
    doomed = workers(
        postgres_url, "doomed", lease=LONG_LEASE, failpoints="tool.before_finished=kill"
    )
    assert await doomed.exit_code() == -signal.SIGKILL
    assert await lapse_the_lease(postgres_url, "t") == 1
    workers(postgres_url, "heir", lease=LONG_LEASE)

    async def done() -> bool:
        return await status_of(store, "t") == "done"

    await until(done, "the heir finishes the task")
    assert marker.read_text() == "once\n"  # the command ran once; Bash is not retry_safe
    types = await log_types(store, "t")
    assert types.count("ToolStarted") == 1 and types.count("ToolFinished") == 1


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--lease", "0"], "a lease must be between 1 and 3600 seconds, not 0"),
        (["--concurrency", "0"], "Invalid value for '--concurrency'"),
        (["--queues", ","], "a queue name must not be empty"),
    ],
)
def test_bad_worker_options_are_refused(
    postgres_url: str, arguments: list[str], message: str
) -> None:
    import os
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "noeta", "worker", *arguments],
        env={**os.environ, "NOETA_STORE": postgres_url},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode in (1, 2) and message in result.stderr
    assert "Traceback" not in result.stderr


def background(command: str) -> dict[str, object]:
    call = {"id": "job1", "name": "Bash", "input": {"command": command, "run_in_background": True}}
    return {"tool_calls": [call]}


async def test_a_background_job_holds_the_claim_and_its_result_arrives_once(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    await add_task(
        store,
        tmp_path,
        "t",
        background("sleep 1; echo from-the-job"),
        {"text": "I will wait for it."},
        {"text": "The job said from-the-job."},
    )
    worker = workers(postgres_url, "w", lease=30)  # renewed every 10 s: it cannot lapse here

    async def holding() -> bool:
        return await status_of(store, "t") == "holding"

    await until(holding, "the task waits holding its claim")
    assert await store.claim("other", ["default"], 30) is None  # nobody else may take it

    async def done() -> bool:
        return await status_of(store, "t") == "done"

    await until(done, "the job's result is taken and the task finishes")
    types = await log_types(store, "t")
    assert types.count("JobStarted") == 1 and types.count("JobFinished") == 1
    finished = next(e.data for e in await store.read_log("t") if e.type == "JobFinished")
    assert finished["exit_code"] == 0 and "from-the-job" in finished["output"]  # type: ignore[index,operator]
    assert "resuming under its held claim" in worker.log()


async def test_a_job_whose_worker_dies_is_recorded_lost_and_the_model_told_once(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    await add_task(
        store,
        tmp_path,
        "t",
        background("sleep 30"),
        {"text": "Waiting."},
        {"text": "It was lost; I will check."},
    )
    first = workers(postgres_url, "first", lease=LONG_LEASE)

    async def holding() -> bool:
        return await status_of(store, "t") == "holding"

    await until(holding, "the task holds its claim while the job runs")
    first.signal(signal.SIGKILL)
    assert await first.exit_code() == -signal.SIGKILL
    assert await lapse_the_lease(postgres_url, "t") == 1
    workers(postgres_url, "second", lease=LONG_LEASE)

    async def done() -> bool:
        return await status_of(store, "t") == "done"

    await until(done, "another worker records the job lost and finishes")
    types = await log_types(store, "t")
    assert types.count("JobLost") == 1 and "JobFinished" not in types
    taken = [e for e in await store.read_log("t") if e.type == "JobLost"]
    assert taken[0].data["job_id"] == "job1"  # type: ignore[index]


async def test_a_connection_killed_under_an_append_is_a_lost_claim(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    # SPEC §3: the connection is lost while a write is in flight -> CommitUnknown -> the
    # claim is treated as lost; the next runner reads the log. The server really drops it:
    # the test holds the task's row lock so the append waits in the server, then
    # terminates that backend.

    await add_task(store, tmp_path, "t", {"text": "after the drop"})
    # Frozen before its second append until the test holds the row lock.
    worker = workers(
        postgres_url, "victim", lease=LONG_LEASE, failpoints="append.before_commit=pause@2"
    )
    await until(worker.paused, "the worker freezes before its second append")
    async with an_append_waiting_on_its_row(postgres_url, worker) as (blocker, admin, pid):
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        # Released at once: the cut append was the model reply's, and the worker keeps the
        # reply for the next claimer (ADR-0082) before it reports the claim lost; the
        # keep's row in late_results takes a key-share lock on this very task row.
        blocker.rollback()

    async def noticed() -> bool:
        return "task t: claim lost (lost the connection" in worker.log()

    await until(noticed, "the worker treats the claim as lost")
    assert "noeta model reply, epoch 1 came after epoch 1's claim was gone; kept" in worker.log()
    # It gave the claim up; the store still records it until its lease lapses.
    assert await lapse_the_lease(postgres_url, "t") == 1

    async def done() -> bool:
        return await status_of(store, "t") == "done"

    await until(done, "the task is claimed again once the lease lapsed, and finished")
    assert "took over task t (epoch 2)" in worker.log()
    assert (await log_types(store, "t")).count("TaskFinished") == 1


async def test_an_append_blocked_past_its_deadline_is_a_lost_claim_and_costs_no_task(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    # ADR-0152: a server merely slow, not a forgotten path. The append waits in the server
    # on a row lock the test holds past the worker's deadline: CommitUnknown, the claim
    # treated as lost, and the worker's idle and listening connections replaced once
    # (needlessly here: the price of telling a forgotten path at its first deadline). The
    # task is taken over once its lease lapsed and finished once; nothing fails.
    await add_task(store, tmp_path, "t", {"text": "after the wait"})
    worker = workers(
        postgres_url, "slow", lease=LONG_LEASE, failpoints="append.before_commit=pause@1"
    )
    await until(worker.paused, "the worker freezes before its first append")
    async with an_append_waiting_on_its_row(postgres_url, worker) as (blocker, _, _):

        async def replaced() -> bool:
            return REPLACED in worker.log()

        await until(replaced, "the append's deadline passes", within=60)
        # Released now: the worker's keep of the model call's outcome (ADR-0082) takes a
        # key-share lock on this row, and each of its tries held here past a deadline
        # would replace the connections again, a deadline apart.
        blocker.rollback()

    async def noticed() -> bool:
        return "task t: claim lost (" in worker.log()

    await until(noticed, "the worker treats the claim as lost")
    assert "may or may not have landed" in worker.log()
    assert await lapse_the_lease(postgres_url, "t") == 1

    async def done() -> bool:
        return await status_of(store, "t") == "done"

    await until(done, "the task is taken over and finished")
    assert "took over task t (epoch 2)" in worker.log()
    assert worker.log().count(REPLACED) == 1
    types = await log_types(store, "t")
    assert types.count("TaskFinished") == 1 and "TaskFailed" not in types, types


async def test_a_quiet_workers_idle_sessions_killed_cost_no_task(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    # ADR-0127: a quiet worker keeps to its warm sessions, so the others sit idle and a
    # server's idle_session_timeout or a restart of their backends ends them unseen. The
    # server really ends them; the pools pass over each one they would hand out (ADR-0148):
    # no write of the burst meets an ended session, so no claim is lost or taken over,
    # and every task ends done, each claimed once.
    import psycopg

    await add_task(store, tmp_path, "warm", {"text": "warm"})
    quiet = workers(postgres_url, "quiet", concurrency=6)

    async def warm_done() -> bool:
        return await status_of(store, "warm") == "done"

    await until(warm_done, "the first task is done")
    idle = (
        "SELECT pid FROM pg_stat_activity WHERE application_name = 'noeta-worker:quiet'"
        " AND state = 'idle' AND query NOT LIKE 'LISTEN%'"
    )
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        ended = [row[0] for row in admin.execute(idle).fetchall()]
        for pid in ended:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    assert len(ended) >= 6, ended  # the pool's sessions (concurrency + 2) and the claims'

    async def all_ended() -> bool:  # ended, not ending: one ending mid-statement is a cut
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
            left = "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)"
            row = await (await admin.execute(left, (ended,))).fetchone()
        return row is not None and row[0] == 0

    await until(all_ended, "the server has ended every idle session")
    for n in range(12):
        await add_task(store, tmp_path, f"t{n}", {"text": f"answer {n}"})

    async def all_done() -> bool:
        return all([await status_of(store, f"t{n}") == "done" for n in range(12)])

    await until(all_done, "every task of the burst is done")
    quiet.signal(signal.SIGTERM)
    assert await quiet.exit_code() == 0
    assert quiet.log().count("claimed task") == 13  # each claimed once
    assert "claim lost" not in quiet.log()
    assert "took over task" not in quiet.log()
    assert "outcome is unknown" not in quiet.log()  # nor a claim's, on the claims' own
