"""A chord survives the SIGKILL of the worker holding it at each of its boundaries (its
members' launch, its taking of their ends, its callback's launch): another real worker
finishes it, the callback runs once, and each member's end is taken once (ADR-0104)."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest

from noeta.backends.stores import open_store
from noeta.client import AsyncClient
from noeta.client.canvas import chord, group
from noeta.core.rules import events
from tests.client.canvas_jobs import add, tsum
from tests.worker.conftest import WorkerProcess

LONG = 600  # never lapses during a test: the test lapses it, once the holder is dead

# Every live claim's lease ends now (the dead worker's claims: the canvas and any member).
_LAPSE_POSTGRES = """UPDATE tasks SET lease_until = now(), claimable_at = now()
 WHERE status IN ('running', 'holding')"""
_LAPSE_SQLITE = """UPDATE tasks SET lease_until = ?, claimable_at = ?
 WHERE status IN ('running', 'holding')"""


@pytest.fixture
async def client(store_url: str, tmp_path: Path) -> AsyncIterator[AsyncClient]:
    await (await open_store(store_url, migrate=True)).close()
    config = tmp_path / "noeta.yaml"
    config.write_text("plugins:\n  - module: tests.client.canvas_jobs\n")
    async with AsyncClient(store_url, config=str(config)) as client:
        yield client


# The worker holding the chord is killed at each boundary in turn, each by the failpoint's
# first hit in its own process: the header's launch (no member made yet); members handed
# back, their ends not yet taken; every end taken, the callback not yet launched.
BOUNDARIES = (
    "canvas.before_launch=kill",
    "canvas.before_ends_taken=kill",
    "canvas.before_launch=kill",
)


async def test_a_chord_whose_worker_is_killed_at_each_boundary_runs_its_callback_once(
    client: AsyncClient, store_url: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    config = tmp_path / "noeta.yaml"
    env = {"NOETA_CONFIG": str(config), "NOETA_TEST_LEDGER": str(ledger)}
    handle = await client.canvas(chord(group(add.s(n, 300) for n in range(4)), tsum.s()))
    for at, failpoint in enumerate(BOUNDARIES):
        doomed = WorkerProcess(
            store_url, f"doomed{at}", tmp_path, env=env, lease=LONG, poll=0.1, failpoints=failpoint
        )
        try:
            assert await doomed.exit_code(within=60) == -signal.SIGKILL
        finally:
            doomed.stop()
        await _lapse_every_lease(store_url)
    last = WorkerProcess(store_url, "last", tmp_path, env=env, lease=LONG, poll=0.1)
    try:
        assert await client.job_result(handle, timeout=60) == 1206  # 300 + 301 + 302 + 303
    finally:
        last.stop()
    lines = (await asyncio.to_thread(ledger.read_text)).splitlines()
    assert lines.count("tsum [300, 301, 302, 303]") == 1
    returned = [
        tailed.event.child_id
        async for tailed in client.tail(handle, follow=False)
        if isinstance(tailed.event, events.SubtaskReturned)
    ]
    assert len(returned) == len(set(returned)) == 5  # each member's end taken once
    assert len(await client.children(handle)) == 5  # four members and the callback, made once


async def _lapse_every_lease(url: str) -> None:
    if url.startswith("sqlite:///"):
        now = time.time_ns() // 1000  # the sqlite store's clock: microseconds

        def lapse() -> None:
            with sqlite3.connect(url.removeprefix("sqlite:///")) as database:
                database.execute(_LAPSE_SQLITE, (now, now))

        await asyncio.to_thread(lapse)
        return
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
        await admin.execute(_LAPSE_POSTGRES)
