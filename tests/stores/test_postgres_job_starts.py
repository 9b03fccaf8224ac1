"""A claim that starts fresh jobs, on PostgreSQL (ADR-0101; the behaviour is the store
contract's, noeta/testing/store_contract/job_starts.py): the text it stores is the one
`events.encode` writes, byte for byte, and the statement stays one psycopg caches."""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
import pytest
from psycopg._queries import MAX_CACHED_STATEMENT_LENGTH

from noeta.backends.stores import open_store
from noeta.backends.stores.postgres import claim_sql
from noeta.backends.stores.postgres.claim_sql import (
    CLAIM_AND_START_JOBS,
    CLAIM_NAMED_AND_START_JOBS,
)
from noeta.core.ports import payload
from noeta.core.ports.store import JobStarts, Store
from noeta.core.rules import events as ev
from noeta.testing.store_contract.job_starts import JOB_INPUT, JOB_PIN, claim_starting, job


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[Store]:
    opened = await open_store(postgres_url, migrate=True)
    yield opened
    await opened.close()


@pytest.mark.parametrize("retry_of", ["", 'an "earlier" one'])
async def test_the_stored_tool_started_is_the_encoders_text(
    store: Store, postgres_url: str, retry_of: str
) -> None:
    await store.create_task(job("j", retry_of=retry_of))
    [claimed] = await claim_starting(store, JobStarts((JOB_PIN,)))
    assert claimed.loaded is not None and claimed.loaded.started_by_claim
    with psycopg.connect(postgres_url) as connection:
        row = connection.execute("SELECT data FROM events WHERE seq = 4").fetchone()
    assert row is not None
    assert row[0] == payload.encode(ev.encode(ev.ToolStarted("job", "send", JOB_INPUT))[1])


# Every statement of claim_sql.py, by name: the ones sent with parameters, on every claim.
CLAIMS = {
    name: statement
    for name, statement in vars(claim_sql).items()
    if name.isupper()
    and not name.startswith("_")
    and isinstance(statement, str)
    and "%(" in statement
}


@pytest.mark.parametrize("name", sorted(CLAIMS))
def test_every_claim_is_short_enough_for_psycopgs_cache(name: str) -> None:
    """psycopg converts a statement longer than this again at every execute: measured at
    about 50 regex matches a claim (cProfile of a worker draining jobs). The job claims
    have little room left (ADR-0145): a few bytes more would cross it."""
    statement = CLAIMS[name]
    length = len(statement.encode())
    assert length <= MAX_CACHED_STATEMENT_LENGTH, f"{name} is {length} bytes"
    assert "--" not in statement  # a compacted one is one line: a comment would end it


def test_the_claims_keep_the_text_others_count_them_by() -> None:
    """bench/idle_wakeups.py and tests find the claims in pg_stat_statements by it."""
    assert "owner_epoch = t.owner_epoch +" in CLAIM_AND_START_JOBS
    assert "owner_epoch = t.owner_epoch +" in CLAIM_NAMED_AND_START_JOBS


async def test_the_claimers_pin_written_with_other_spacing_is_still_its_own(
    store: Store, postgres_url: str
) -> None:
    """The claim compares pins as JSON, not as text (ADR-0138): a job whose pin is the
    claimer's, stored with other spacing, is started with its ToolStarted alone, as its
    run would start it (its run compares decoded pins), not with a second pin."""
    await store.create_task(job("j"))
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(
            """UPDATE events SET data = replace(data, '","', '", "')"""
            " WHERE task_id = 'j' AND seq = 3"
        )
        [(spaced,)] = connection.execute("SELECT data FROM events WHERE seq = 3").fetchall()
    assert spaced != payload.encode(ev.encode(ev.PluginsPinned((JOB_PIN,)))[1])
    [claimed] = await claim_starting(store, JobStarts((JOB_PIN,)))
    assert claimed.loaded is not None and claimed.loaded.started_by_claim
    types = [e.type for e in await store.read_log("j")]
    assert types == ["TaskCreated", "CallRequested", "PluginsPinned", "ToolStarted"]
