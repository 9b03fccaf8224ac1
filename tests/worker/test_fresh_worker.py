"""A fresh worker is ready before its first claim: its pool's connections are open and
the imports its first run needs are done, so nothing of that stands between a claim and
its first renewal on a loaded machine (issue 26, item 5).

Ordered by events, not time: the worker process pauses itself (failpoint) right after its
first claim commits; the test counts its connections then, and reads from its own
`-X importtime` output, in order with its log, what it imported after that claim.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import psycopg

from noeta.core.ports.store import Store

from .conftest import WorkerProcess, add_task, status_of, until

CONCURRENCY = 3
COUNT_CONNECTIONS = """
SELECT count(*) FROM pg_stat_activity
 WHERE application_name = %s AND datname = current_database()"""


def imported_after_first_claim(log: str) -> list[str]:
    lines = log.splitlines()
    first = next(i for i, line in enumerate(lines) if "claimed task t " in line)
    return [
        line.rpartition("|")[2].strip()
        for line in lines[first:]
        if line.startswith("import time:") and not line.endswith("| imported package")
    ]


async def test_a_fresh_worker_opens_its_pool_and_imports_before_it_claims(
    store: Store, postgres_url: str, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    bash = {"id": "c1", "name": "Bash", "input": {"command": "true"}}
    await add_task(store, tmp_path, "t", {"tool_calls": [bash]}, {"text": "done"})
    worker = workers(
        postgres_url,
        "fresh",
        lease=30,
        concurrency=CONCURRENCY,
        failpoints="claim.after_commit=pause@1",
        env={"PYTHONPROFILEIMPORTTIME": "1"},
    )
    await until(worker.paused, "the worker pauses right after its first claim")
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
        cursor = await admin.execute(COUNT_CONNECTIONS, ("noeta-worker:fresh",))
        row = await cursor.fetchone()
    assert row is not None
    # Every connection of the pool (one per slot, the renewer's, one to spare) was open
    # before the claim; the LISTEN connection may count too.
    assert row[0] >= CONCURRENCY + 2, f"{row[0]} connections open at the first claim"
    worker.signal(signal.SIGCONT)

    async def done() -> bool:
        return await status_of(store, "t") == "done"

    await until(done, "the task finishes")
    worker.signal(signal.SIGTERM)
    assert await worker.exit_code() == 0
    late = imported_after_first_claim(worker.log())
    assert late == [], f"imported after the first claim: {late}"
