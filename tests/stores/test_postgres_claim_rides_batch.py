"""A claim that starts jobs and comes while a group commit's batch is in flight rides with
the appends queued behind it: one round trip, one commit (ADR-0116); a plain claim goes
alone (ADR-0140). Each row is still fenced on its own, a refusal is told to its run
alone, and a fault tells each run and the claim what going alone would have told them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import psycopg
import pytest

from noeta.backends.stores.postgres import PostgresStore
from noeta.core.errors import CommitUnknown, Conflict, StoreError, StoreUnavailable
from noeta.core.ports.store import (
    Claim,
    ClaimedTask,
    Finish,
    JobStarts,
    NewEvent,
    TaskStatus,
)
from noeta.testing.store_contract import LEASE, created
from tests.stores.test_postgres_group_commit import (
    backend_of_waiting_batch,
    claimed,
    count_of,
)

RUNS = 8
NEW = 3
STARTS = JobStarts(())  # a claim that may start jobs: the one that rides (ADR-0140)

# The transactions that wrote the finishes (events past the first) and the new claims.
WRITING_TRANSACTIONS = """
SELECT count(DISTINCT x) FROM (
    SELECT xmin::text AS x FROM events WHERE task_id = ANY (%(finished)s) AND seq > 1
    UNION ALL
    SELECT xmin::text FROM tasks WHERE id = ANY (%(new)s)) AS w
"""


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[PostgresStore]:
    opened = await PostgresStore.open(postgres_url, max_connections=4)
    yield opened
    await opened.close()


async def finishing_and_claiming(
    store: PostgresStore,
    claims: dict[str, Claim],
    ids: Sequence[str],
    plain: bool = False,
) -> tuple[list[object], list[ClaimedTask] | BaseException]:
    """Every run finishes and a claim (one that may start jobs, unless `plain`) comes
    after them, all in one turn of the loop: the finishes go in one batch, and the
    claim that starts jobs rides with them."""
    finish = Finish(TaskStatus.DONE)
    starts = None if plain else STARTS
    claiming = store.claim_and_load(
        "w", ["default"], LEASE, limit=NEW, snapshot_version="v", job_starts=starts
    )
    outcomes = await asyncio.gather(
        *(store.append(claims[i], 1, [NewEvent("done", i)], next_state=finish) for i in ids),
        claiming,
        return_exceptions=True,
    )
    claim = outcomes[-1]
    assert isinstance(claim, list | BaseException)
    return list(outcomes[:-1]), claim


async def new_tasks(store: PostgresStore) -> list[str]:
    ids = [f"new{n}" for n in range(NEW)]
    for task_id in ids:
        await store.create_task(created(task_id))
    return ids


async def writing_transactions(url: str, finished: Sequence[str], new: Sequence[str]) -> int:
    return await count_of(url, WRITING_TRANSACTIONS, {"finished": finished, "new": new})


async def test_a_claim_rides_with_the_finishes_queued_behind_a_batch(
    store: PostgresStore, postgres_url: str
) -> None:
    ids = [f"f{n}" for n in range(RUNS)]
    claims = await claimed(store, ids)
    new = await new_tasks(store)
    outcomes, claim = await finishing_and_claiming(store, claims, ids)
    assert outcomes == [2] * RUNS
    assert isinstance(claim, list)
    assert sorted(each.claim.task_id for each in claim) == new
    assert all(each.loaded is not None for each in claim)
    # The finishes and the claim in one transaction.
    assert await writing_transactions(postgres_url, ids, new) == 1
    assert store._group_commit.claims_carried == 1
    for task_id in ids:
        task = await store.get_task(task_id)
        assert task is not None and task.status is TaskStatus.DONE


async def test_a_plain_claim_goes_alone_beside_the_finishes(
    store: PostgresStore, postgres_url: str
) -> None:
    """A claim of agent tasks: riding, it kept an agent drain's runs in groups out of
    phase (ADR-0140); it goes at once, in a transaction of its own."""
    ids = [f"p{n}" for n in range(RUNS)]
    claims = await claimed(store, ids)
    new = await new_tasks(store)
    outcomes, claim = await finishing_and_claiming(store, claims, ids, plain=True)
    assert outcomes == [2] * RUNS
    assert isinstance(claim, list) and sorted(c.claim.task_id for c in claim) == new
    assert await writing_transactions(postgres_url, ids, new) == 2
    assert store._group_commit.claims_carried == 0


async def test_a_refused_finish_beside_a_claim_is_refused_to_its_run_alone(
    store: PostgresStore, postgres_url: str
) -> None:
    ids = [f"s{n}" for n in range(RUNS)]
    claims = await claimed(store, ids)
    new = await new_tasks(store)
    lost = ids[5]
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as other:
        await other.execute(  # taken over by another worker, as a lapsed lease's claim does
            "UPDATE tasks SET owner = 'w2', owner_epoch = owner_epoch + 1 WHERE id = %s", [lost]
        )
    outcomes, claim = await finishing_and_claiming(store, claims, ids)
    refused = {i: o for i, o in zip(ids, outcomes, strict=True) if isinstance(o, BaseException)}
    assert list(refused) == [lost]
    assert isinstance(refused[lost], Conflict)
    assert "claimed again since" in str(refused[lost])
    assert [e.seq for e in await store.read_log(lost)] == [1]
    assert isinstance(claim, list) and sorted(c.claim.task_id for c in claim) == new
    written = [i for i in ids if i != lost]
    assert await writing_transactions(postgres_url, written, new) == 1
    assert store._group_commit.claims_carried == 1


async def test_a_claim_the_server_refuses_costs_the_finishes_nothing(
    store: PostgresStore, postgres_url: str
) -> None:
    ids = [f"r{n}" for n in range(RUNS)]
    claims = await claimed(store, ids)
    await new_tasks(store)
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
        # The claim reads queue_settings, the batch does not: the claim alone is refused.
        await admin.execute("ALTER TABLE queue_settings RENAME TO queue_settings_gone")
        try:
            outcomes, claim = await finishing_and_claiming(store, claims, ids)
        finally:
            await admin.execute("ALTER TABLE queue_settings_gone RENAME TO queue_settings")
    assert outcomes == [2] * RUNS  # rolled back with the claim, then written alone
    assert isinstance(claim, StoreError) and not isinstance(claim, CommitUnknown)
    assert store._group_commit.claims_carried == 0
    for task_id in ids:
        assert [e.seq for e in await store.read_log(task_id)] == [1, 2]
    assert (
        len(await store.claim_and_load("w", ["default"], LEASE, limit=NEW, snapshot_version="v"))
        == NEW
    )


async def test_a_batch_and_claim_whose_session_is_terminated_tell_each_once(
    store: PostgresStore, postgres_url: str
) -> None:
    ids = [f"k{n}" for n in range(RUNS)]
    claims = await claimed(store, ids)
    new = await new_tasks(store)
    finish = Finish(TaskStatus.DONE)
    async with await psycopg.AsyncConnection.connect(postgres_url) as blocker:
        # One row of the batch is locked: the batch, and the claim behind it, wait there.
        await blocker.execute("SELECT 1 FROM tasks WHERE id = %s FOR UPDATE", [ids[-1]])
        runs = [
            asyncio.ensure_future(store.append(claims[i], 1, [NewEvent("d", i)], next_state=finish))
            for i in ids
        ]
        claim = asyncio.ensure_future(
            store.claim_and_load(
                "w", ["default"], LEASE, limit=NEW, snapshot_version="v", job_starts=STARTS
            )
        )
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
            pid = await backend_of_waiting_batch(admin)
            await admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        outcomes = await asyncio.gather(*runs, claim, return_exceptions=True)
        await blocker.rollback()
    for outcome in outcomes:  # sent in one turn: all in the batch, the claim with them
        assert isinstance(outcome, CommitUnknown | StoreUnavailable), outcome
    assert isinstance(outcomes[-1], CommitUnknown)  # the claim's: the worker adopts
    assert len({id(outcome) for outcome in outcomes}) == RUNS + 1  # each its own
    for task_id in ids:  # the transaction never committed: nothing of it landed
        assert [e.seq for e in await store.read_log(task_id)] == [1]
    for task_id in new:  # nor the claim
        task = await store.get_task(task_id)
        assert task is not None and task.status is TaskStatus.READY
    assert await store.append(claims[ids[1]], 1, [NewEvent("d", 1)]) == 2  # the store goes on
