"""A mutant run's early stop (early_stop.py) on a real store with a mutant applied: a
running task's broken log stops the run; a running task's unfinished business (a job
still running) does not."""

from __future__ import annotations

import asyncio

from noeta.backends.stores import open_store
from noeta.core.ports.store import NewEvent, NewTask
from noeta.core.rules import events
from tests.cluster.early_stop import EarlyChecks
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
