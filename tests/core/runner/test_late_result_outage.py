"""A late result whose keep meets a store outage is kept once the store is back (issue
26, item 3): the keep is retried with backoff while the worker lives, so the next
claimer records the real result, not "outcome unknown". The outage is real: the fault
proxy resets the connection as the keep's statement goes out."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from noeta.backends.models.registry import ProviderRegistry
from noeta.backends.stores.postgres import PostgresStore, migrate_database
from noeta.core.errors import Conflict
from noeta.core.runner.task import TaskRunner
from noeta.core.store import Claim, Store
from noeta.testing.fault_proxy import FaultProxy
from noeta.testing.store_contract import SHORT_LEASE, eventually_claim

from .test_late_results import CALL, Charge, _nothing, finished_calls
from .test_runner import create, script


@pytest.fixture
async def direct(postgres_url: str) -> AsyncIterator[Store]:
    await migrate_database(postgres_url)
    store = await PostgresStore.open(postgres_url)
    yield store
    await store.close()


@pytest.fixture
def proxy(direct: Store, postgres_url: str) -> Iterator[FaultProxy]:
    parts = conninfo_to_dict(postgres_url)
    proxy = FaultProxy(str(parts["host"]), int(parts["port"]), statement_marker=b"late_results")
    proxy.start()
    yield proxy
    proxy.stop()


@pytest.fixture
async def proxied(postgres_url: str, proxy: FaultProxy) -> AsyncIterator[Store]:
    dsn = make_conninfo(postgres_url, host="127.0.0.1", port=str(proxy.port))
    store = await PostgresStore.open(dsn, deadline_seconds=5.0, max_connections=1)
    yield store
    await store.close()


@pytest.mark.parametrize("before", [True, False], ids=["not_sent", "reply_lost"])
async def test_a_late_result_kept_across_an_outage_reaches_the_next_claimer(
    direct: Store, proxied: Store, proxy: FaultProxy, tmp_path: Path, before: bool
) -> None:
    charge = Charge(_nothing)
    worker = TaskRunner(proxied, ProviderRegistry(), tools={"Charge": charge})
    await create(
        direct, "t", script(tmp_path, CALL, {"text": "done"}), prompt="go", tools=("Charge",)
    )
    first = await proxied.claim("first", ["default"], SHORT_LEASE)
    assert first is not None
    heirs: list[Claim] = []

    async def taken_over_then_the_store_drops() -> None:
        heirs.append(await eventually_claim(direct, "heir", ["default"]))
        proxy.cut_statement(before=before)  # the keep's first attempt is cut off

    charge.meanwhile = taken_over_then_the_store_drops
    with pytest.raises(Conflict):
        await worker.run(first)
    assert proxy.statements_cut == {"before": int(before), "after": int(not before)}
    (kept,) = await direct.late_results("t")
    assert (kept.content, kept.epoch) == ("charged, receipt 1", first.epoch)
    heir = TaskRunner(direct, ProviderRegistry(), tools={"Charge": charge})
    assert (await heir.run(heirs[0])).state.finished == "done"
    finished = await finished_calls(direct)
    assert [(f["recovery"], f["content"]) for f in finished] == [("late", "charged, receipt 1")]
    assert charge.runs == ["t:c1"]
