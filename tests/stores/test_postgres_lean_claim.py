"""A claimer whose queues have no settings sends the lean claim statement (ADR-0144); the
moment one of its queues gains settings, the statement says so and the claimer turns to
the full one in the same call: a queue's limits are never bypassed, not even once."""

from __future__ import annotations

from typing import Any

import pytest

from noeta.backends.stores import open_store
from noeta.backends.stores.postgres import PostgresStore
from noeta.backends.stores.postgres.claim_sql import (
    CLAIM_AND_LOAD,
    CLAIM_AND_START_JOBS,
    LEAN_CLAIM_AND_LOAD,
    LEAN_CLAIM_AND_START_JOBS,
)
from noeta.core.ports.queue_settings import QueueChange, queue_settings_store
from noeta.core.ports.store import TaskStatus
from noeta.testing.store_contract.fixtures import LEASE, created


async def claim(store: Any, worker: str, limit: int) -> list[str]:
    claimed = await store.claim_and_load(
        worker, ["q", "other"], LEASE, limit=limit, snapshot_version="v"
    )
    return sorted(c.claim.task_id for c in claimed)


@pytest.mark.parametrize("room", [0, 1])
async def test_settings_added_while_a_claimer_runs_lean_hold_from_its_next_claim(
    postgres_url: str, room: int
) -> None:
    store = await open_store(postgres_url, migrate=True)
    try:
        assert isinstance(store, PostgresStore)
        for n in range(5):
            assert await store.create_task(created(f"t{n}", "q"))
        assert await claim(store, "w", 1) == ["t0"]
        assert not store.queue_settings_seen  # lean: no queue of its claimer had settings
        # An operator limits the queue while the worker runs t0.
        await queue_settings_store(store).set_queue("q", QueueChange(concurrency=1 + room))
        # The lean walk skips q (its NOT EXISTS), says it saw settings, and the full
        # statement claims at once what the limit leaves: nothing, or one more.
        assert await claim(store, "w", 5) == ["t1"][:room]
        assert store.queue_settings_seen
        running = await store.list_tasks(status=TaskStatus.RUNNING, queue="q")
        assert len(running) == 1 + room
        assert await claim(store, "w", 5) == []  # full from now on: the limit holds
    finally:
        await store.close()


def test_the_lean_statements_carry_no_settings_machinery() -> None:
    for lean, full in (
        (LEAN_CLAIM_AND_LOAD, CLAIM_AND_LOAD),
        (LEAN_CLAIM_AND_START_JOBS, CLAIM_AND_START_JOBS),
    ):
        assert "noeta_claimable_under_limits" in full and "charged AS" in full
        assert "noeta_claimable_under_limits" not in lean and "charged AS" not in lean
        # The lean one reads queue_settings twice: the due walk's skip, and its part 4.
        assert lean.count("queue_settings") == 2


@pytest.mark.parametrize("seen", [False, True])
async def test_a_claim_ahead_takes_nothing_from_a_queue_with_settings(
    postgres_url: str, seen: bool
) -> None:
    """A busy worker's claim ahead (ADR-0158) waits in the worker for a slot: in a queue
    with settings, a limit would count it running while it waits, so it walks only the
    queues without, whether or not its store has seen settings before."""
    store = await open_store(postgres_url, migrate=True)
    try:
        assert isinstance(store, PostgresStore)
        for n in range(3):
            assert await store.create_task(created(f"q{n}", "q"))
            assert await store.create_task(created(f"o{n}", "other"))
        await queue_settings_store(store).set_queue("q", QueueChange(concurrency=5))
        store.queue_settings_seen = seen
        ahead = await store.claim_and_load(
            "w", ["q", "other"], LEASE, limit=5, snapshot_version="v", ahead=True
        )
        assert sorted(c.claim.task_id for c in ahead) == ["o0", "o1", "o2"]
        # The claim loop's own claim still takes q's, within its limit.
        assert await claim(store, "w", 5) == ["q0", "q1", "q2"]
    finally:
        await store.close()
