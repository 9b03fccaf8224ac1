"""A late result whose keep meets a store outage is kept once the store is back (issue
26, item 3): the keep is retried with backoff while the worker lives, so the next
claimer records the real result, not "outcome unknown". The outage is real: the fault
proxy resets the store's connections just before the keep."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import cast

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from noeta.backends.models.registry import ProviderRegistry
from noeta.backends.stores.postgres import PostgresStore, migrate_database
from noeta.core.errors import Conflict
from noeta.core.ports.store import Claim, LateResult, Store
from noeta.core.runner.task import TaskRunner
from noeta.testing.fault_proxy import FaultProxy
from noeta.testing.store_contract import LEASE, take_over

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
    proxy = FaultProxy(str(parts["host"]), int(parts["port"]))
    proxy.start()
    yield proxy
    proxy.stop()


@pytest.fixture
async def proxied(postgres_url: str, proxy: FaultProxy) -> AsyncIterator[Store]:
    dsn = make_conninfo(postgres_url, host="127.0.0.1", port=str(proxy.port))
    store = await PostgresStore.open(dsn, deadline_seconds=5.0, max_connections=1)
    yield store
    await store.close()


class KeepsThroughTheProxy:
    """The worker's store, whose late-result keeps alone go through the fault proxy: the
    outage the test makes meets the keep, not the append before it."""

    def __init__(self, store: Store, proxied: Store) -> None:
        self.inner = store
        self.proxied = proxied

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def keep_late_result(self, result: LateResult) -> bool:
        return await self.proxied.keep_late_result(result)


async def test_a_late_result_kept_across_an_outage_reaches_the_next_claimer(
    direct: Store, proxied: Store, proxy: FaultProxy, tmp_path: Path
) -> None:
    charge = Charge(_nothing)
    store = cast(Store, KeepsThroughTheProxy(direct, proxied))
    worker = TaskRunner(store, ProviderRegistry(), tools={"Charge": charge})
    await create(
        direct, "t", script(tmp_path, CALL, {"text": "done"}), prompt="go", tools=("Charge",)
    )
    await proxied.late_results("t")  # the proxied pool's one connection is open
    first = await direct.claim("first", ["default"], LEASE)
    assert first is not None
    heirs: list[Claim] = []

    async def taken_over_then_the_store_drops() -> None:
        heirs.append(await take_over(direct, first))
        proxy.drop_all()  # every connection to the store is reset: the keep's first fails

    charge.meanwhile = taken_over_then_the_store_drops
    with pytest.raises(Conflict):
        await worker.run(first)
    (kept,) = await direct.late_results("t")
    assert (kept.content, kept.epoch) == ("charged, receipt 1", first.epoch)
    heir = TaskRunner(direct, ProviderRegistry(), tools={"Charge": charge})
    assert (await heir.run(heirs[0])).state.finished == "done"
    finished = await finished_calls(direct)
    assert [(f["recovery"], f["content"]) for f in finished] == [("late", "charged, receipt 1")]
    assert charge.runs == ["t:c1"]
