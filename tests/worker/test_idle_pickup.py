"""Idle pickup with real `noeta worker` processes (ADR-0087): one submit wakes one of the
idle workers, not all of them; a registered worker that was killed strands nothing.
Statements are counted by the server (pg_stat_statements on a private server), not timed."""

from __future__ import annotations

import shutil
import signal
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from noeta.backends.stores import open_store
from noeta.backends.stores.embedded import EmbeddedPostgres, make_home
from noeta.core.ports.store import Store
from noeta.testing.postgres import TEST_SETTINGS, with_search_path
from tests.worker.conftest import WorkerProcess, add_task, status_of, until

IDLE_WORKERS = 4
# Each worker's most recent statement, over all its connections: whether it has ended.
SETTLED = """
SELECT count(*) FILTER (WHERE a.application_name = 'noeta-listen'),
       count(DISTINCT a.application_name) FILTER (WHERE a.application_name LIKE 'noeta-worker:%%'),
       bool_and(a.state = 'idle') FILTER (WHERE a.application_name LIKE 'noeta-worker:%%')
  FROM pg_stat_activity AS a WHERE a.datname = current_database()
"""
# Registrations, where they exist (a build before ADR-0087 has none: its idle workers
# are settled once they listen and their last statement ended).
REGISTERED = """
SELECT CASE WHEN to_regclass('idle_workers') IS NULL THEN -1 ELSE 0 END
"""
# The test's own statements (these, and its reads of the task) are left out.
STATEMENTS = """
SELECT query, calls FROM public.pg_stat_statements
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND query NOT LIKE '%%pg_stat%%' AND query NOT LIKE 'SELECT id, queue, status, %%'
   AND query NOT LIKE '%%to_regclass%%' AND query NOT LIKE 'SELECT count(*) FROM idle_workers'
"""
# In every claim statement and only there (the server shows constants as $n).
CLAIM_TEXT = "owner_epoch = t.owner_epoch +"
# seconds_until_due's, alone: the registration holds the same text.
SECONDS_UNTIL_DUE_TEXT = "claimable_at > now()"


@pytest.fixture(scope="module")
def counted_server() -> Iterator[str]:
    """A server of this module's own with pg_stat_statements loaded."""
    settings = {**TEST_SETTINGS, "shared_preload_libraries": "pg_stat_statements"}
    embedded = EmbeddedPostgres(make_home("noeta-test-pg-"), settings=settings)
    try:
        dsn = embedded.start()
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements SCHEMA public")
        yield dsn
    finally:
        embedded.stop()
        shutil.rmtree(embedded.root, ignore_errors=True)


@pytest.fixture
async def counted(counted_server: str) -> AsyncIterator[tuple[str, Store]]:
    schema = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(counted_server, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    url = with_search_path(counted_server, schema)
    store = await open_store(url, migrate=True)
    yield url, store
    await store.close()


async def settled(url: str, workers: int, registered: int) -> bool:
    """Every worker listens, its last statement has ended, and `registered` wait idle."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
        row = await (await admin.execute(SETTLED)).fetchone()
        has_registry = await (await admin.execute(REGISTERED)).fetchone()
        if has_registry is not None and has_registry[0] == 0:
            counted = await (await admin.execute("SELECT count(*) FROM idle_workers")).fetchone()
            assert counted is not None
            registered_now = counted[0]
        else:
            registered_now = registered
    assert row is not None
    return (*row, registered_now) == (workers, workers, True, registered)


async def statements(url: str) -> dict[str, int]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
        rows = await (await admin.execute(STATEMENTS)).fetchall()
    return {query: calls for query, calls in rows}


async def reset_statements(url: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
        await admin.execute("SELECT public.pg_stat_statements_reset()")


@pytest.mark.parametrize("concurrency", [1, 4])
async def test_one_submit_wakes_one_of_the_idle_workers(
    counted: tuple[str, Store],
    tmp_path: Path,
    workers: Callable[..., WorkerProcess],
    concurrency: int,
) -> None:
    url, store = counted
    for n in range(IDLE_WORKERS):
        workers(url, f"w{n}", lease=30, poll=300.0, concurrency=concurrency)
    # Four worker processes start at once: on a loaded 2-core machine that alone can pass
    # the default 30 s bound (a bound on a real condition, not a wait for time).
    await until(
        lambda: settled(url, IDLE_WORKERS, IDLE_WORKERS), "every worker waits idle", within=180
    )
    await reset_statements(url)

    await add_task(store, tmp_path, "t", {"text": "done"})

    async def done() -> bool:
        return await status_of(store, "t") == "done"

    await until(done, "the task ran")
    # The woken one, done, registers again: then all are idle as before.
    await until(lambda: settled(url, IDLE_WORKERS, IDLE_WORKERS), "every worker waits again")
    counts = await statements(url)
    kinds = {"claim": 0, "register": 0, "seconds_until_due": 0}
    for query, calls in counts.items():
        if CLAIM_TEXT in query:
            kinds["claim"] += calls
        elif "noeta_register_idle" in query:
            kinds["register"] += calls
        elif SECONDS_UNTIL_DUE_TEXT in query:
            kinds["seconds_until_due"] += calls
    # The woken one claims once. Its claim found just the task it was called for, so it
    # registers when a slot frees (the registration says whether anything became
    # claimable meanwhile) rather than claiming again first. Before ADR-0087 every idle
    # worker claimed and asked seconds_until_due per NOTIFY; after it, until this test,
    # the woken one claimed 2 (1 slot) or 3 times (4 slots).
    assert kinds == {"claim": 1, "register": 1, "seconds_until_due": 0}, counts
    # In all: the create, the claim, the task's 2 appends, the registration.
    assert sum(counts.values()) == 5, counts


async def test_a_killed_registered_worker_strands_no_task(
    counted: tuple[str, Store], tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    url, store = counted
    survivor = workers(url, "survivor", lease=30, poll=1.0, concurrency=1)
    await until(lambda: settled(url, 1, 1), "the survivor waits idle", within=180)
    killed = workers(url, "killed", lease=30, poll=300.0, concurrency=1)
    await until(lambda: settled(url, 2, 2), "both wait idle", within=180)
    killed.signal(signal.SIGKILL)  # its row stays, the newest: the one a task would wake
    assert await killed.exit_code() == -signal.SIGKILL

    await add_task(store, tmp_path, "t", {"text": "done"})

    async def done() -> bool:
        return await status_of(store, "t") == "done"

    await until(done, "the survivor's poll found the task the dead worker was called for")
    record = await store.get_task("t")
    assert record is not None and record.owner == "survivor"
    assert survivor.process.poll() is None
