"""A claim that starts the fresh plain jobs it takes (issue 28, ADR-0099): their first events
written by the claim's own commit, exactly as the claimer's first append would write them,
and only where that append would have been exactly those events. Both stores."""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
import pytest
from psycopg._queries import MAX_CACHED_STATEMENT_LENGTH

from noeta.backends.stores import open_store
from noeta.backends.stores.postgres.claims import CLAIM_AND_START_JOBS
from noeta.core.ports import payload
from noeta.core.ports.pin import Pin
from noeta.core.ports.store import (
    ClaimedTask,
    Delivery,
    JobStarts,
    NewEvent,
    NewTask,
    Store,
)
from noeta.core.rules import events as ev
from tests.worker.conftest import until

JOB_PIN = Pin("jobs", "module:jobs", "1.0", "h")
OTHER_PIN = Pin("other", "module:other", "2.0", "h")
# An input whose text has quotes, a backslash, non-ASCII and a "retry_of" of its own.
INPUT: dict[str, payload.JSONValue] = {"to": 'a "b" \\ é', "retry_of": "x", "n": [1, {}]}


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    opened = await open_store(store_url, migrate=True)
    yield opened
    await opened.close()


def job(task_id: str, *, pins: tuple[Pin, ...] | None = (JOB_PIN,), retry_of: str = "") -> NewTask:
    made: list[ev.Event] = [
        ev.TaskCreated(model="", tools=("send",)),
        ev.CallRequested("job", "send", INPUT, retry_of=retry_of),
    ]
    if pins is not None:
        made.append(ev.PluginsPinned(pins))
    return NewTask(task_id, [NewEvent(*ev.encode(event)) for event in made], queue="q")


async def claim(store: Store, starts: JobStarts | None, limit: int = 1) -> list[ClaimedTask]:
    return await store.claim_and_load(
        "w", ["q"], 600, limit=limit, snapshot_version="v", job_starts=starts
    )


def types(claimed: ClaimedTask) -> list[str]:
    assert claimed.loaded is not None
    return [event.type for event in claimed.loaded.events]


async def test_a_fresh_jobs_claim_writes_its_tool_started_as_the_run_would(
    store: Store, store_url: str
) -> None:
    await store.create_task(job("j", retry_of="earlier"))
    [claimed] = await claim(store, JobStarts((JOB_PIN,)))

    assert claimed.loaded is not None and claimed.loaded.started_by_claim
    log = await store.read_log("j")
    assert [e.type for e in log] == ["TaskCreated", "CallRequested", "PluginsPinned", "ToolStarted"]
    assert claimed.loaded.events == log  # read back with the claim, as it landed
    started = log[-1]
    assert (started.seq, started.epoch, started.owner) == (4, claimed.claim.epoch, "w")
    assert started.data == ev.encode(ev.ToolStarted("job", "send", INPUT))[1]
    assert (await store.get_task("j")).last_seq == 4  # type: ignore[union-attr]
    if store_url.startswith("postgres"):  # the stored text, byte for byte
        with psycopg.connect(store_url) as connection:
            row = connection.execute("SELECT data FROM events WHERE seq = 4").fetchone()
        assert row is not None
        assert row[0] == payload.encode(ev.encode(ev.ToolStarted("job", "send", INPUT))[1])


async def test_a_claimer_with_other_pins_writes_them_first_as_its_append_would(
    store: Store,
) -> None:
    await store.create_task(job("pinned"))
    await store.create_task(job("unpinned", pins=None))
    claimed = await claim(store, JobStarts((JOB_PIN, OTHER_PIN)), limit=2)

    for each in claimed:
        assert each.loaded is not None and each.loaded.started_by_claim
        assert types(each)[-2:] == ["PluginsPinned", "ToolStarted"]
        assert each.loaded.events[-2].data == ev.encode(ev.PluginsPinned((JOB_PIN, OTHER_PIN)))[1]
        record = await store.get_task(each.claim.task_id)
        assert record is not None and record.last_seq == each.loaded.events[-1].seq


async def test_what_a_claim_does_not_start(store: Store) -> None:
    """No JobStarts asked; a pin the claimer lacks; a message in the inbox; an agent task;
    a job taken over: each is claimed and left to its run, as before."""
    await store.create_task(job("not-asked"))
    [plain] = await claim(store, None)
    await store.create_task(job("lacking", pins=(Pin("gone", "module:gone", "1", "h"),)))
    [lacking] = await claim(store, JobStarts((JOB_PIN,)))
    await store.create_task(job("told"))
    await store.deliver(Delivery("told", {"kind": "message", "text": "hi"}, "message:1"))
    [told] = await claim(store, JobStarts((JOB_PIN,)))
    agent = [NewEvent(*ev.encode(ev.TaskCreated(model="scripted:x", prompt="go")))]
    await store.create_task(NewTask("agent", agent, queue="q"))
    [agent_claim] = await claim(store, JobStarts((JOB_PIN,)))

    for each in (plain, lacking, told, agent_claim):
        assert each.loaded is not None and not each.loaded.started_by_claim, each.claim
        assert "ToolStarted" not in types(each)


async def test_a_taken_over_job_is_not_started_by_its_new_claim(store: Store) -> None:
    await store.create_task(job("lapsed"))
    [first] = await store.claim_and_load("w0", ["q"], 0.001, snapshot_version="v")
    claimed: list[ClaimedTask] = []

    async def taken_over() -> bool:  # once the first claim's lease (1 ms) has lapsed
        claimed.extend(await claim(store, JobStarts((JOB_PIN,))))
        return bool(claimed)

    await until(taken_over, "the lapsed job is claimed again")
    [second] = claimed
    assert second.claim.taken_over and second.claim.epoch == first.claim.epoch + 1
    assert second.loaded is not None and not second.loaded.started_by_claim
    assert "ToolStarted" not in types(second)


def test_the_starting_claim_is_short_enough_for_psycopgs_cache() -> None:
    """psycopg converts a statement longer than this again at every execute: measured at
    about 50 regex matches a claim (cProfile of a worker draining jobs)."""
    assert len(CLAIM_AND_START_JOBS.encode()) <= MAX_CACHED_STATEMENT_LENGTH
    assert "--" not in CLAIM_AND_START_JOBS  # on one line, a comment would end it
    # Text others find the claim by in pg_stat_statements (bench/idle_wakeups.py, tests).
    assert "owner_epoch = t.owner_epoch +" in CLAIM_AND_START_JOBS
