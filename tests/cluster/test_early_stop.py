"""A mutant run's early stop (early_stop.py) on a real store with a mutant applied: a
running task's broken log stops the run; a running task's unfinished business (a job
still running) does not."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from noeta.backends.stores import open_store
from noeta.core.ports.store import InboxEntry, NewEvent, NewTask, StoredEvent
from noeta.core.rules import events
from tests.cluster.early_stop import EarlyChecks
from tests.cluster.invariants import takes_marked
from tests.cluster.mutants import apply_mutant


def created() -> list[NewEvent]:
    return [NewEvent(*events.encode(events.TaskCreated(model="scripted:none", prompt="go")))]


async def test_a_running_tasks_seq_gap_stops_the_run_and_a_running_job_does_not(
    postgres_url: str,
) -> None:
    await asyncio.to_thread(apply_mutant, postgres_url, "no-expected-seq")
    store = await open_store(postgres_url, migrate=True)
    try:
        for task in ("job-runs", "stale-view"):
            await store.create_task(NewTask(task, created()))
        job_runs = await store.claim("w", ["default"], 30.0)
        stale = await store.claim("w", ["default"], 30.0)
        assert job_runs is not None and stale is not None
        # A job not ended yet: a problem only in a finished task's log (check_log's).
        await store.append(job_runs, 1, [NewEvent("JobStarted", {"job_id": "j1"})])
        # The stale view's append past the log's end: only the mutant lets it land.
        await store.append(stale, 2, [NewEvent("ModelCalled", {})])
        early = EarlyChecks(store)
        found = await early.look()
        assert found == [f"{stale.task_id}: seqs are not 1..n: [1, 3]"]
        assert early.checked == set()  # both still run: checked again at the next look
        # A phase that never ends on its own is cancelled at the first problem.
        assert await early.run_until_found(asyncio.Event().wait()) is True
    finally:
        await store.close()


def test_a_running_tasks_take_must_be_marked_in_the_inbox_read_after_its_log() -> None:
    now = datetime(2026, 12, 2, tzinfo=UTC)
    log = [
        StoredEvent("t", 1, "TaskCreated", {}, now),
        StoredEvent("t", 2, "MessageTaken", {"inbox_id": 7}, now),
        StoredEvent("t", 3, "SubtaskReturned", {"inbox_id": 8}, now),
    ]
    # Entry 9 came and was taken after the log was read: no problem of this log's.
    inbox = [InboxEntry(7, "t", {}, None, 2, now), InboxEntry(8, "t", {}, None, None, now)]
    inbox.append(InboxEntry(9, "t", {}, None, 4, now))
    assert takes_marked(log, inbox) == ["seq 3: inbox entry 8 taken, not marked taken in the inbox"]
    inbox[1] = InboxEntry(8, "t", {}, None, 3, now)
    assert takes_marked(log, inbox) == []
