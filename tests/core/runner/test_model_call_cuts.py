"""Why a model call got no reply, told apart for real (ADR-0080, issue 26 item 1): a
ModelCalled append whose reply the fault proxy drops leaves a call that was never sent,
and the next claimer neither counts it as an interruption nor as a lost worker's; a worker
lived on only if it worked on another task under a claim it held by the call."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from noeta.backends.models.scripted import ScriptedProvider
from noeta.backends.stores.postgres import PostgresStore, migrate_database
from noeta.core.errors import CommitUnknown
from noeta.core.ports.store import NewEvent, Store, StoredEvent
from noeta.core.rules import events
from noeta.core.runner import model_cuts
from noeta.core.runner.task import TaskRunner
from noeta.testing.fault_proxy import FaultProxy
from tests.cluster.processes import APPENDS

from .test_runner import LEASE, CrashingProvider, Fixed, create, script


@pytest.fixture
async def direct(postgres_url: str) -> AsyncIterator[Store]:
    await migrate_database(postgres_url)
    store = await PostgresStore.open(postgres_url)
    yield store
    await store.close()


@pytest.fixture
def proxy(direct: Store, postgres_url: str) -> Iterator[FaultProxy]:
    parts = conninfo_to_dict(postgres_url)
    proxy = FaultProxy(str(parts["host"]), int(parts["port"]), cut_functions=APPENDS)
    proxy.start()
    yield proxy
    proxy.stop()


@pytest.fixture
async def proxied(postgres_url: str, proxy: FaultProxy) -> AsyncIterator[Store]:
    dsn = make_conninfo(postgres_url, host="127.0.0.1", port=str(proxy.port))
    store = await PostgresStore.open(dsn, deadline_seconds=5.0, max_connections=1)
    yield store
    await store.close()


async def test_a_model_call_whose_append_reply_was_lost_is_recorded_as_never_sent(
    direct: Store, proxied: Store, proxy: FaultProxy, tmp_path: Path
) -> None:
    model = script(tmp_path, {"text": "made it"})
    await create(direct, "t", model, prompt="go")
    provider = CrashingProvider(ScriptedProvider.from_file(model.split(":", 1)[1]), crashes=0)
    first = await proxied.claim_task("first", "t", LEASE)
    assert first is not None
    proxy.cut_statement(before=False)  # ModelCalled commits; its reply never arrives
    with pytest.raises(CommitUnknown):
        await TaskRunner(proxied, Fixed(provider)).run(first)
    assert proxy.statements_cut["after"] == 1 and provider.bodies == []
    # The first worker's claim is freed by the test (as a lapse would), not by a race.
    assert await direct.release(first)
    heir = await direct.claim_task("heir", "t", LEASE)
    assert heir is not None
    result = await TaskRunner(direct, Fixed(provider)).run(heir)
    assert (result.state.finished, result.state.last_answer) == ("done", "made it")
    log = await direct.read_log("t")
    cuts = [(e.data["epoch"], e.data["cause"]) for e in log if e.type == "ModelCallCut"]  # type: ignore[index]
    assert cuts == [(first.epoch, "not_sent")]
    assert len(provider.bodies) == 1  # sent once, by the heir


async def called_by(store: Store, worker: str, model: str) -> StoredEvent:
    """Task t with a ModelCalled written by `worker`'s claim, which is then freed."""
    await create(store, "t", model, prompt="go")
    claim = await store.claim_task(worker, "t", LEASE)
    assert claim is not None
    await store.append(claim, 1, [NewEvent(*events.encode(events.ModelCalled("ab" * 32)))])
    assert await store.release(claim)
    (called,) = await store.read_log("t", after_seq=1)
    return called


async def test_a_worker_that_wrote_for_another_task_before_the_call_lived_on(
    direct: Store, tmp_path: Path
) -> None:
    model = script(tmp_path, {"text": "x"})
    await create(direct, "other", model, prompt="go")
    other = await direct.claim_task("w", "other", LEASE)
    assert other is not None
    await direct.append(other, 1, [NewEvent(*events.encode(events.PluginRecord("p", 1)))])
    called = await called_by(direct, "w", model)
    assert await model_cuts.why_cut(direct, "t", called) == "call"


async def test_a_worker_restarted_under_the_same_name_did_not_live_on(
    direct: Store, tmp_path: Path
) -> None:
    # Its claims now were made, and written under, after the call: it was lost meanwhile.
    model = script(tmp_path, {"text": "x"})
    called = await called_by(direct, "w", model)
    await create(direct, "other", model, prompt="go")
    other = await direct.claim_task("w", "other", LEASE)
    assert other is not None
    await direct.append(other, 1, [NewEvent(*events.encode(events.PluginRecord("p", 1)))])
    assert await model_cuts.why_cut(direct, "t", called) == "worker_lost"
