"""Lease renewal: one statement for every claim; a claim taken over is reported lost at
once; a store that cannot be reached costs a claim only at the worker's own deadline."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import psycopg
import pytest

from noeta.backends.stores import open_store
from noeta.backends.stores.postgres import PostgresStore
from noeta.core.errors import Conflict, StoreUnavailable
from noeta.core.ports.store import Claim, Finish, NewEvent, Store, TaskStatus
from noeta.testing.store_contract import created
from noeta.worker.renewal import Renewer

from .conftest import until


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    store = await open_store(store_url, migrate=True)
    yield store
    await store.close()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_claim_taken_over_is_lost_at_the_next_renewal(store: Store) -> None:
    for task_id in ("kept", "taken"):
        await store.create_task(created(task_id))
    kept = await store.claim_task("w", "kept", 0.3)
    taken = await store.claim_task("w", "taken", 0.3)
    assert kept is not None and taken is not None
    lost: list[Claim] = []
    renewer = Renewer(store, 0.3, lost.append)
    renewer.add(kept)
    renewer.add(taken)

    async def taken_over() -> bool:
        return await store.claim_task("other", "taken", 30) is not None

    await renewer.renew_once()  # renews both while both are ours
    assert lost == []
    await until(taken_over, "the other worker takes 'taken' over after its lease")
    await renewer.renew_once()
    assert [claim.task_id for claim in lost] == ["taken"]


async def test_a_claim_whose_finish_landed_before_the_round_is_let_go_not_lost(
    store: Store,
) -> None:
    # The round read the task after its run's finish committed and before the run heard
    # so: the claim was reported lost, the run cancelled while waiting for a finish that
    # had landed, and the log said "claim lost (the task is done)" (a CI failure, load 8).
    await store.create_task(created("t"))
    claim = await store.claim_task("w", "t", 30)
    assert claim is not None
    lost: list[Claim] = []
    renewer = Renewer(store, 30, lost.append)
    renewer.add(claim)
    renewer.finishing(claim)  # its run sends its finish
    await store.append(claim, 1, [NewEvent("end", {})], next_state=Finish(TaskStatus.DONE))
    await renewer.renew_once()
    assert lost == [] and not renewer.holds(claim)


async def test_a_finishing_claim_taken_over_is_not_renewed_and_its_finish_is_refused(
    store: Store,
) -> None:
    # Let go quietly, the claim is not kept alive either: its finish's refusal tells its run.
    await store.create_task(created("t"))
    claim = await store.claim_task("w", "t", 0.3)
    assert claim is not None
    renewer = Renewer(store, 0.3, lambda _: None)
    renewer.add(claim)
    renewer.finishing(claim)

    async def taken_over() -> bool:
        return await store.claim_task("other", "t", 30) is not None

    await until(taken_over, "another worker takes the task over after its lease")
    await renewer.renew_once()
    assert not renewer.holds(claim)
    with pytest.raises(Conflict):
        await store.append(claim, 1, [NewEvent("end", {})], next_state=Finish(TaskStatus.DONE))


class Unreachable:
    """A store whose renewals fail as an unreachable PostgreSQL's would."""

    async def renew(self, claims: object, lease_seconds: float) -> object:
        raise StoreUnavailable("cannot reach PostgreSQL at 127.0.0.1:5432/noeta")


async def test_an_unreachable_store_costs_the_claim_only_at_the_own_deadline(
    store: Store,
) -> None:
    await store.create_task(created("t"))
    claim = await store.claim_task("w", "t", 30)
    assert claim is not None
    clock, lost = Clock(), []
    renewer = Renewer(Unreachable(), 30, lost.append, monotonic=clock)  # type: ignore[arg-type]
    renewer.add(claim)
    for seconds in (10, 20, 29.9):
        clock.now = 1000.0 + seconds
        await renewer.renew_once()
        assert lost == []  # still within the lease, by this worker's own clock
    clock.now = 1030.0
    await renewer.renew_once()
    assert lost == [claim]


class HeldRound:
    """The real store, except that the first renewal round is held back (before it
    reaches the store) until `release` is set; every round's claims are recorded."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.rounds: list[set[str]] = []
        self.held = asyncio.Event()
        self.release = asyncio.Event()

    async def renew(self, claims: Sequence[Claim], lease_seconds: float) -> Any:
        self.rounds.append({claim.task_id for claim in claims})
        if len(self.rounds) == 1:
            self.held.set()
            await self.release.wait()
        return await self._store.renew(claims, lease_seconds)


async def test_a_claim_made_while_a_round_is_out_is_renewed_at_once(store: Store) -> None:
    # A round that the store answers late must not leave a claim made meanwhile to the
    # next round: its lease runs from its claim, and the next round is a third of a lease
    # after the late one returns (issue 26, item 4). The lease is long: only the renewer's
    # own doing can renew "new" while the first round is held.
    for task_id in ("old", "new"):
        await store.create_task(created(task_id))
    old = await store.claim_task("w", "old", 60)
    assert old is not None
    held = HeldRound(store)
    renewer = Renewer(held, 60, lambda claim: None)  # type: ignore[arg-type]
    renewer.add(old)
    first_round = asyncio.create_task(renewer.renew_once())
    await asyncio.wait_for(held.held.wait(), 30)
    new = await store.claim_task("w", "new", 60)
    assert new is not None
    renewer.add(new)

    async def new_renewed() -> bool:
        return any("new" in carried for carried in held.rounds[1:])

    try:
        await until(new_renewed, "the claim made during the held round is renewed")
        assert not first_round.done()  # renewed while the first round was still out
        renewed = await store.get_task("new")
        assert renewed is not None and renewed.lease_until is not None
        assert new.lease_until is not None and renewed.lease_until > new.lease_until
    finally:
        held.release.set()
        await first_round
    assert renewer.holds(old) and renewer.holds(new)


LEASE = 4.0  # renewed every 1.3 s: a lapse needs the test's loop stalled for 2.7 s
LEASE_OF = "SELECT lease_until, lease_until > clock_timestamp() FROM tasks WHERE id = %s"
LOCK_THE_ROW = "SELECT 1 FROM tasks WHERE id = %s FOR UPDATE"
WAITING_ON_A_LOCK = """
SELECT count(*) FROM pg_stat_activity
 WHERE application_name = %s AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()
"""


async def test_renewal_is_not_starved_when_every_pool_connection_is_busy(
    postgres_url: str,
) -> None:
    # A worker's store (ADR-0139) of 3 connections: 2 for its group commit's rounds, one
    # for everything else. That one is held for real (a statement waiting on a row lock an
    # operator holds), and more statements queue behind it. A short lease is renewed
    # round after round meanwhile: the renewer never queues behind the runs (issue 26).
    name = "noeta-renewal-test"
    # A long deadline: the statements queued behind the held one wait for the pool
    # throughout instead of giving up, and so would a renewal that queued with them.
    store = await PostgresStore.open(
        postgres_url,
        application_name=name,
        max_connections=3,
        min_connections=3,
        for_worker=True,
        deadline_seconds=120,
    )
    admin = await psycopg.AsyncConnection.connect(postgres_url, autocommit=True)
    blocked: list[asyncio.Task[bool]] = []
    renewing: asyncio.Task[None] | None = None
    try:
        for task_id in ("kept", "locked"):
            await store.create_task(created(task_id))
        kept = await store.claim_task("w", "kept", LEASE)
        locked = await store.claim_task("w", "locked", 60)
        assert kept is not None and kept.lease_until is not None and locked is not None
        await admin.execute("BEGIN")
        await admin.execute(LOCK_THE_ROW, ("locked",))
        blocked = [asyncio.create_task(store.release(locked)) for _ in range(3)]

        # Another session of the operator's reads pg_stat_activity: this one is in a
        # transaction whose snapshot of it would not move.
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as look:

            async def busy() -> bool:
                row = await (await look.execute(WAITING_ON_A_LOCK, (name,))).fetchone()
                return row is not None and row[0] >= 1

            await until(busy, "the pool's one connection waits on the locked row")
            lost: list[Claim] = []
            renewer = Renewer(store, LEASE, lost.append)
            renewer.add(kept)
            renewing = asyncio.create_task(renewer.run())
            first_end, lapsed = kept.lease_until, []

            async def outlived() -> bool:
                lease_until, live = await lease_of(look, "kept")
                if not live:
                    lapsed.append(lease_until)
                return (lease_until - first_end).total_seconds() > LEASE  # a lease past

            await until(outlived, "the claim is renewed a lease past its first", within=60)
            assert lapsed == [] and lost == []  # live whenever looked at, never given up
            assert not any(release.done() for release in blocked)  # still busy throughout
    finally:
        if renewing is not None:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing
        await admin.execute("ROLLBACK")
        await asyncio.gather(*blocked, return_exceptions=True)
        await admin.close()
        await store.close()


async def lease_of(connection: psycopg.AsyncConnection[Any], task_id: str) -> tuple[Any, bool]:
    """The claim's lease end, and whether it is live now by the database's clock."""
    row = await (await connection.execute(LEASE_OF, (task_id,))).fetchone()
    assert row is not None
    return row[0], row[1]
