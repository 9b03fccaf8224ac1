"""A `noeta fork` SIGKILLed while its create is in the database leaves no new task or a whole
one (issue 30): the fork's log is written by one statement in one transaction (ADR-0091)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import psycopg

from noeta.backends.stores import open_store
from noeta.client.forking import ForkChange, fork_points, forked_events
from noeta.core.ports.store import NewEvent, NewTask, StoredEvent
from tests.core.test_golden_logs import read_log

NOETA = str(Path(sys.executable).parent / "noeta")
GOLDEN = "tool_results_back_to_the_model"
T = TypeVar("T")

# The fork's own backend, once it waits for the lock its insert needs.
_WAITING_FORK = """
SELECT pid FROM pg_stat_activity
 WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid() AND datname = current_database()
"""


def _until(check: Callable[[], T], what: str) -> T:
    deadline = time.monotonic() + 60  # a bound on the wait, not a measure of anything
    while not (found := check()):
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.05)  # a poll of pg_stat_activity
    return found


async def _create(url: str, task: NewTask) -> None:
    store = await open_store(url, migrate=True)
    try:
        await store.create_task(task)
    finally:
        await store.close()


async def _log(url: str, task_id: str) -> list[StoredEvent]:
    store = await open_store(url)
    try:
        return await store.read_log(task_id)
    finally:
        await store.close()


def test_a_fork_killed_in_its_create_leaves_no_task_or_a_whole_one(postgres_url: str) -> None:
    source = read_log(GOLDEN)
    asyncio.run(_create(postgres_url, NewTask("g", [NewEvent(e.type, e.data) for e in source])))
    at = max(fork_points(source))
    expected = [(e.type, e.data) for e in forked_events("g", source, at, ForkChange())]
    with psycopg.connect(postgres_url) as blocker, psycopg.connect(postgres_url) as watcher:
        watcher.autocommit = True
        # A SHARE lock lets the fork read its source and stops its insert, in the database.
        blocker.execute("LOCK TABLE tasks IN SHARE MODE")
        fork = subprocess.Popen(
            [NOETA, "fork", "g", "--at", str(at), "--id", "f"],
            env={**os.environ, "NOETA_STORE": postgres_url},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            waiting = _until(lambda: watcher.execute(_WAITING_FORK).fetchall(), "saw it wait")
            os.kill(fork.pid, signal.SIGKILL)
            fork.wait(30)
        finally:
            fork.kill()
        blocker.rollback()  # the lock goes; the killed client's statement runs on, or not
        pids = [pid for (pid,) in waiting]
        gone = "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)"
        _until(lambda: watcher.execute(gone, [pids]).fetchone() == (0,), "saw its backend end")
    forked = asyncio.run(_log(postgres_url, "f"))
    assert forked == [] or [(e.type, e.data) for e in forked] == expected, forked
