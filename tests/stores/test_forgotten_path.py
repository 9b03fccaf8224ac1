"""A statement whose deadline passed replaces the store's idle connections, at most once a
deadline (ADR-0152): a firewall that forgot one connection forgot the others open with it,
while a server that is merely slow (statements blocked past their deadline on a row lock,
here) costs one replacement a deadline, never one per statement."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from datetime import timedelta

import psycopg
import pytest

from noeta.backends.stores.postgres import PostgresStore
from noeta.core.errors import CommitUnknown, StoreUnavailable
from noeta.testing.store_contract import created
from tests.worker.conftest import REPLACED

DEADLINE = 2.0
APPLICATION = "noeta-forgotten-path"
IDLE = "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND state = 'idle'"
TASKS = ("a", "b", "c")
# A write that waits on its task's row lock while the test holds it.
LOCK_TASK = "SELECT id FROM tasks WHERE id = %(id)s FOR UPDATE"


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[PostgresStore]:
    opened = await PostgresStore.open(
        postgres_url,
        migrate=True,
        deadline_seconds=DEADLINE,
        max_connections=4,
        min_connections=4,
        application_name=APPLICATION,
    )
    try:
        yield opened
    finally:
        await opened.close()


async def _idle_sessions(admin: psycopg.AsyncConnection[object]) -> set[int]:
    return {row[0] for row in await (await admin.execute(IDLE, (APPLICATION,))).fetchall()}


async def test_deadlines_passing_together_replace_the_idle_connections_once(
    store: PostgresStore, postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    for task_id in TASKS:
        await store.create_task(created(task_id))
    caplog.set_level(logging.WARNING, logger="noeta.backends.stores.postgres.forgotten_path")
    async with (
        await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin,
        await psycopg.AsyncConnection.connect(postgres_url) as blocker,
    ):
        locking = "SELECT 1 FROM tasks WHERE id = ANY(%s) FOR UPDATE"
        await blocker.execute(locking, (list(TASKS),))
        idle_before = await _idle_sessions(admin)
        # Two statements wait on their rows past the deadline, side by side (each its
        # own round trip: appends would share one): one replacement. The store's two
        # other sessions sat idle meanwhile: replaced.
        first, second = await asyncio.gather(
            *(store._write(LOCK_TASK, {"id": task_id}) for task_id in TASKS[:2]),
            return_exceptions=True,
        )
        assert isinstance(first, CommitUnknown) and isinstance(second, CommitUnknown)
        assert caplog.text.count(REPLACED) == 1
        for _ in range(200):  # the server's record of the sessions ending, not a sleep
            if not idle_before & await _idle_sessions(admin):
                break
            await asyncio.sleep(0.05)
        assert not idle_before & await _idle_sessions(admin), "idle sessions kept"
        # The next deadline to pass, a deadline after that replacement: another.
        with pytest.raises(CommitUnknown):
            await store._write(LOCK_TASK, {"id": TASKS[2]})
        assert caplog.text.count(REPLACED) == 2
        await blocker.rollback()
    # The store runs on, on the new sessions.
    assert (await store.get_task("a")) is not None
    assert await store._write(LOCK_TASK, {"id": "c"}) == ("c",)


async def test_a_deadline_passing_makes_a_listener_listen_again_and_catch_up(
    store: PostgresStore, postgres_url: str
) -> None:
    # A LISTEN connection forgotten by the path would miss every NOTIFY until keepalive
    # reset it (90 s): a deadline passing elsewhere shuts it, and its listener listens
    # again on a new connection and says so ("*": look now), as after any lost connection.
    await store.create_task(created("a"))
    finishes = store.finishes()
    assert await anext(finishes) == "*"
    async with await psycopg.AsyncConnection.connect(postgres_url) as blocker:
        await blocker.execute(LOCK_TASK, {"id": "a"})
        with pytest.raises(CommitUnknown):
            await store._write(LOCK_TASK, {"id": "a"})
        assert await asyncio.wait_for(anext(finishes), 10 * DEADLINE) == "*"
        await blocker.rollback()
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
        await admin.execute("NOTIFY noeta_finished, 'a'")
    assert await asyncio.wait_for(anext(finishes), 10 * DEADLINE) == "a"
    await finishes.aclose()


async def test_a_prune_statement_past_its_deadline_replaces_them_too(
    store: PostgresStore, postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The prune runs on a session of its own (the scheduler's retention, `noeta db
    # prune`), outside the pool's statements: its deadline passing is the same evidence.
    await store.create_task(created("a"))
    caplog.set_level(logging.WARNING, logger="noeta.backends.stores.postgres.forgotten_path")
    async with await psycopg.AsyncConnection.connect(postgres_url) as blocker:
        await blocker.execute("LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(StoreUnavailable):
            await store.prune_finished(timedelta(0), dry_run=True)
        await blocker.rollback()
    assert caplog.text.count(REPLACED) == 1
