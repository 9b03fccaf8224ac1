"""An idle worker's lone claim held open for its run's first write (ADR-0136): one commit
makes both durable; nobody sees the claim before it; a write that does not come in time
leaves the claim to commit alone; a refused first write leaves the claim committed, as
without the hold; a cut one undoes it, the task claimable again at once, and the undone
claim's epoch (the next claimer's too) writes nothing more from here. In-process, on the
real PostgreSQL; the faults are real (a refusal by the fence, `pg_terminate_backend`); a
model limit's wait keeps the claim."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import psycopg
import pytest

from noeta.backends.stores.postgres import PostgresStore, held_claim
from noeta.core.errors import CommitUnknown, Conflict
from noeta.core.ports.model_limits import ModelBudget, ModelBudgetWait
from noeta.core.ports.store import Claim, ClaimedTask, NewEvent
from noeta.testing.store_contract import LEASE, created

CALLED = [NewEvent("ModelCalled", {"request_hash": "h"})]
# Long enough that only the run's write (or the test) settles the claim, never the clock.
NEVER = 600.0


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[PostgresStore]:
    opened = await PostgresStore.open(postgres_url, max_connections=4)
    yield opened
    await opened.close()


async def held(store: PostgresStore, task_id: str) -> ClaimedTask:
    await store.create_task(created(task_id))
    (claimed,) = await store.claim_and_load(
        "w", ["default"], LEASE, snapshot_version="v", hold=True
    )
    assert claimed.claim.task_id == task_id and claimed.durable is not None
    return claimed


async def seen_by_others(url: str, task_id: str) -> tuple[str, int, int]:
    """The task's status, epoch and log length, as another session sees them."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as other:
        cursor = await other.execute(
            "SELECT status, owner_epoch, (SELECT count(*) FROM events WHERE task_id = t.id)"
            " FROM tasks AS t WHERE id = %s",
            (task_id,),
        )
        row = await cursor.fetchone()
    assert row is not None
    return row[0], row[1], row[2]


async def step(store: PostgresStore, claim: Claim, after: int) -> int:
    return await store.append(claim, after, [NewEvent("step", {"n": after})])


async def test_the_claim_and_its_runs_first_write_commit_as_one(
    store: PostgresStore, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    claimed, last = await held_open(store, monkeypatch)
    # Nothing says the task is claimed yet: another session sees it as it was.
    assert await seen_by_others(postgres_url, "a") == ("ready", 0, last)
    assert await step(store, claimed.claim, last) == last + 1
    assert claimed.durable is not None and await claimed.durable
    assert await seen_by_others(postgres_url, "a") == ("running", 1, last + 1)
    assert await step(store, claimed.claim, last + 1) == last + 2  # the next goes as any


async def test_a_claim_whose_first_write_does_not_come_commits_alone(
    store: PostgresStore, postgres_url: str
) -> None:
    claimed = await held(store, "a")
    assert claimed.durable is not None
    assert await asyncio.wait_for(claimed.durable, 60)  # HOLD_SECONDS passed: committed
    assert (await seen_by_others(postgres_url, "a"))[:2] == ("running", 1)
    assert claimed.loaded is not None
    last = claimed.loaded.events[-1].seq
    assert await step(store, claimed.claim, last) == last + 1


async def claimed_again_and_stale_refused(
    store: PostgresStore, postgres_url: str, claimed: ClaimedTask, last: int
) -> None:
    """The undone claim left the task claimable at once (a lease of LEASE not waited out),
    the next claim has the undone one's epoch, and the undone claim writes nothing."""
    assert await seen_by_others(postgres_url, "a") == ("ready", 0, last)
    other = await PostgresStore.open(postgres_url, max_connections=2)  # another worker's
    try:
        (again,) = await other.claim_and_load("w2", ["default"], LEASE, snapshot_version="v")
        assert again.claim.epoch == claimed.claim.epoch == 1  # the fence cannot tell them apart
        with pytest.raises(Conflict):
            await step(store, claimed.claim, last)
        assert await step(other, again.claim, last) == last + 1
    finally:
        await other.close()
    assert await seen_by_others(postgres_url, "a") == ("running", 1, last + 1)


async def held_open(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> tuple[ClaimedTask, int]:
    """Task "a" claimed and held until its first write (never by the clock); its log's end."""
    monkeypatch.setattr(held_claim, "HOLD_SECONDS", NEVER)
    claimed = await held(store, "a")
    assert claimed.loaded is not None and claimed.durable is not None
    return claimed, claimed.loaded.events[-1].seq


async def test_a_refused_first_write_leaves_the_claim_committed_as_before(
    store: PostgresStore, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused (here by the fence), the write is rolled back alone: the claim commits, the
    run is told as without the hold, and may write again (as a step refused NotStarted
    appends again, ADR-0117)."""
    claimed, last = await held_open(store, monkeypatch)
    assert claimed.durable is not None
    with pytest.raises(Conflict):  # the fence: not the log's end
        await step(store, claimed.claim, last + 5)
    assert await claimed.durable
    assert await seen_by_others(postgres_url, "a") == ("running", 1, last)
    assert await step(store, claimed.claim, last) == last + 1


async def test_a_claim_cut_before_its_first_write_is_undone(
    store: PostgresStore, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    claimed, last = await held_open(store, monkeypatch)
    assert claimed.durable is not None
    backend = store._held["a"]._connection.info.backend_pid  # the claim's open session
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
        await admin.execute("SELECT pg_terminate_backend(%s)", (backend,))
    with pytest.raises(CommitUnknown):  # as a lost first append: no model request follows
        await step(store, claimed.claim, last)
    assert not await claimed.durable
    await claimed_again_and_stale_refused(store, postgres_url, claimed, last)


async def test_a_first_write_told_to_wait_by_a_model_limit_keeps_the_claim(
    store: PostgresStore, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A limit's wait is a row the append answers, not an error: the claim commits with
    what the append wrote (the task handed back until its slot), as before."""
    await store.set_model_limit("fake/*", 1, None)  # one call a minute: the next waits
    await store.create_task(created("first"))
    first = await store.claim_task("w", "first", LEASE)
    assert first is not None
    await store.append_model_called(first, 1, CALLED, ModelBudget(("fake/*",), 10))
    claimed, last = await held_open(store, monkeypatch)
    with pytest.raises(ModelBudgetWait):
        await store.append_model_called(claimed.claim, last, CALLED, ModelBudget(("fake/*",), 10))
    assert claimed.durable is not None and await claimed.durable
    # Epoch 1 kept: the claim committed, with the hand-back the wait wrote (ADR-0075).
    assert await seen_by_others(postgres_url, "a") == ("ready", 1, last)


async def held_open_several(
    store: PostgresStore, monkeypatch: pytest.MonkeyPatch, ids: str
) -> list[tuple[ClaimedTask, int]]:
    """Tasks `ids` claimed by one claim held until their runs' first write (never by the
    clock, ADR-0147), each with its log's end."""
    monkeypatch.setattr(held_claim, "HOLD_SECONDS", NEVER)
    for task_id in ids:
        await store.create_task(created(task_id))
    claimed = await store.claim_and_load(
        "w", ["default"], LEASE, limit=len(ids), snapshot_version="v", hold=True
    )
    assert sorted(each.claim.task_id for each in claimed) == sorted(ids)
    assert all(each.durable is not None and each.loaded is not None for each in claimed)
    return [(each, each.loaded.events[-1].seq) for each in claimed if each.loaded is not None]


async def test_a_claim_of_several_commits_with_the_round_of_their_first_writes(
    store: PostgresStore, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A drain's claim of several agent tasks is held too: the first writes its runs send
    in one turn of the loop go as one round with the claim's commit. Were the round sent
    on a connection of its own, it would wait on the rows the claim holds (until NEVER)."""
    claimed = await held_open_several(store, monkeypatch, "abc")
    for each, last in claimed:  # nobody sees the claim before that commit
        assert await seen_by_others(postgres_url, each.claim.task_id) == ("ready", 0, last)
    written = await asyncio.gather(*(step(store, each.claim, last) for each, last in claimed))
    assert written == [last + 1 for _, last in claimed]
    for each, last in claimed:
        assert each.durable is not None and await each.durable
        assert await seen_by_others(postgres_url, each.claim.task_id) == ("running", 1, last + 1)
    assert not store._held  # settled: the runs' next writes go as any


async def test_a_claim_of_several_cut_in_its_round_is_undone_for_each(
    store: PostgresStore, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session holding the claim ended before its round: each run is told its write's
    outcome is unknown, each task is claimable again at once, and nothing of it landed."""
    claimed = await held_open_several(store, monkeypatch, "ab")
    backend = store._held["a"]._connection.info.backend_pid  # the claim's open session
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
        await admin.execute("SELECT pg_terminate_backend(%s)", (backend,))
    outcomes = await asyncio.gather(
        *(step(store, each.claim, last) for each, last in claimed), return_exceptions=True
    )
    assert all(isinstance(outcome, CommitUnknown) for outcome in outcomes), outcomes
    for each, last in claimed:
        assert each.durable is not None and not await each.durable
        assert await seen_by_others(postgres_url, each.claim.task_id) == ("ready", 0, last)


async def undone_several(
    store: PostgresStore, postgres_url: str, monkeypatch: pytest.MonkeyPatch, ids: str
) -> list[tuple[ClaimedTask, int]]:
    """Tasks `ids` claimed by one held claim whose commit alone failed (its session ended
    first): undone before any run wrote, each task's write refused here from now on."""
    claimed = await held_open_several(store, monkeypatch, ids)
    held = store._held[ids[0]]
    backend = held._connection.info.backend_pid
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
        await admin.execute("SELECT pg_terminate_backend(%s)", (backend,))
    await held.commit_alone()
    assert not await held.durable
    return claimed


async def test_a_write_of_an_undone_claim_of_several_is_refused_naming_its_own_task(
    store: PostgresStore, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    claimed = await undone_several(store, postgres_url, monkeypatch, "ab")
    for each, last in claimed:
        with pytest.raises(Conflict) as refused:
            await step(store, each.claim, last)
        assert refused.value.task_id == each.claim.task_id


async def test_a_round_with_a_write_of_an_undone_claim_refuses_that_row_alone(
    store: PostgresStore, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A double fault (the claim's commit failed, then its run wrote): the round carrying
    that write refuses it, and writes the others it carries, as the fence would."""
    ((undone, undone_last),) = await undone_several(store, postgres_url, monkeypatch, "a")
    await store.create_task(created("other"))
    other = await store.claim_task("w", "other", LEASE)
    assert other is not None
    other_last = (await store.read_log("other"))[-1].seq
    outcomes = await asyncio.gather(
        step(store, undone.claim, undone_last),
        step(store, other, other_last),
        return_exceptions=True,
    )
    assert isinstance(outcomes[0], Conflict) and outcomes[0].task_id == "a", outcomes
    assert outcomes[1] == other_last + 1, outcomes
    assert await seen_by_others(postgres_url, "a") == ("ready", 0, undone_last)
    assert await seen_by_others(postgres_url, "other") == ("running", 1, other_last + 1)


async def test_a_round_carried_by_a_held_claim_refuses_an_undone_claims_row(
    store: PostgresStore, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A round carried by an open claim also names a task of a claim undone before, and
    that task was claimed again elsewhere at the same epoch: the undone claim's row is
    refused here (the fence could not tell the epochs apart), the rest commits."""
    ((undone, undone_last),) = await undone_several(store, postgres_url, monkeypatch, "a")
    other = await PostgresStore.open(postgres_url, max_connections=2)  # another worker's
    try:
        (again,) = await other.claim_and_load("w2", ["default"], LEASE, snapshot_version="v")
        assert again.claim.epoch == undone.claim.epoch == 1
        ((carrier, carrier_last),) = await held_open_several(store, monkeypatch, "b")
        outcomes = await asyncio.gather(
            step(store, undone.claim, undone_last),
            step(store, carrier.claim, carrier_last),
            return_exceptions=True,
        )
    finally:
        await other.close()
    assert isinstance(outcomes[0], Conflict) and outcomes[0].task_id == "a", outcomes
    assert outcomes[1] == carrier_last + 1, outcomes
    assert carrier.durable is not None and await carrier.durable
    assert await seen_by_others(postgres_url, "a") == ("running", 1, undone_last)
    assert await seen_by_others(postgres_url, "b") == ("running", 1, carrier_last + 1)
