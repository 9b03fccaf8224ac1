"""The fault proxy cuts the connection at one kind of statement (an append), before the
server sees it or after it committed, also once the statement is prepared and sent by
name only: what the cluster run uses for its outcome-unknown faults."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from noeta.backends.stores.postgres import PostgresStore, migrate_database
from noeta.core.errors import CommitUnknown
from noeta.core.store import Claim, NewEvent
from noeta.testing.fault_proxy import FaultProxy
from noeta.testing.store_contract import created

# More appends than psycopg's prepare threshold (5): later ones send the name, not the SQL.
PREPARED_AFTER = 7


@pytest.fixture
async def migrated_url(postgres_url: str) -> str:
    await migrate_database(postgres_url)
    return postgres_url


@pytest.fixture
def proxy(migrated_url: str) -> Iterator[FaultProxy]:
    parts = conninfo_to_dict(migrated_url)
    proxy = FaultProxy(str(parts["host"]), int(parts["port"]), statement_marker=b"noeta_append")
    proxy.start()
    yield proxy
    proxy.stop()


@pytest.fixture
async def proxied(migrated_url: str, proxy: FaultProxy) -> AsyncIterator[PostgresStore]:
    dsn = make_conninfo(migrated_url, host="127.0.0.1", port=str(proxy.port))
    store = await PostgresStore.open(dsn, deadline_seconds=1.0, max_connections=1)
    yield store
    await store.close()


async def appended_many(store: PostgresStore) -> Claim:
    await store.create_task(created("a"))
    claim = await store.claim("w", ["default"], 30.0)
    assert claim is not None
    for seq in range(1, PREPARED_AFTER + 1):
        await store.append(claim, seq, [NewEvent("step", seq)])
    return claim


@pytest.mark.parametrize("before", [True, False])
async def test_an_append_cut_before_or_after_it_reaches_the_server(
    proxied: PostgresStore, proxy: FaultProxy, before: bool
) -> None:
    claim = await appended_many(proxied)
    last = PREPARED_AFTER + 1
    await proxied.read_log("a")  # reads are not cut
    proxy.cut_statement(before=before)
    with pytest.raises(CommitUnknown):
        await proxied.append(claim, last, [NewEvent("cut", {})])
    assert proxy.statements_cut == {"before": int(before), "after": int(not before)}
    assert not proxy.statement_cut_pending()
    log = await proxied.read_log("a")  # the pool opens a new connection
    assert [e.type for e in log][-1] == ("step" if before else "cut")
