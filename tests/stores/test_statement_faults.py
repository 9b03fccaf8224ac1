"""The fault proxy cuts the connection at the calls of the SQL functions a test names (an
append), before the server sees it or after it committed, also once the statement is
prepared and sent by name only: what the cluster run uses for its outcome-unknown
faults. It matches whole names from its list, never a prefix of production names."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from noeta.backends.stores.postgres import PostgresStore, migrate_database
from noeta.core.errors import CommitUnknown
from noeta.core.ports.store import Claim, NewEvent
from noeta.testing.fault_proxy import FaultProxy
from noeta.testing.pg_frames import FrontendReader
from noeta.testing.store_contract import created
from tests.cluster.processes import APPENDS

# More appends than psycopg's prepare threshold (5): later ones send the name, not the SQL.
PREPARED_AFTER = 7
# What PostgresStore.append sends for events alone (noeta/backends/stores/postgres/appends.py).
APPEND_EVENTS = "noeta_append_and_continue"


@pytest.fixture
async def migrated_url(postgres_url: str) -> str:
    await migrate_database(postgres_url)
    return postgres_url


@pytest.fixture
def proxy(migrated_url: str) -> Iterator[FaultProxy]:
    parts = conninfo_to_dict(migrated_url)
    proxy = FaultProxy(str(parts["host"]), int(parts["port"]), cut_functions=[APPEND_EVENTS])
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


def message(kind: bytes, *fields: bytes) -> bytes:
    body = b"".join(field + b"\0" for field in fields)
    return kind + (4 + len(body)).to_bytes(4, "big") + body


STARTUP = (8).to_bytes(4, "big") + (196608).to_bytes(4, "big")  # protocol 3.0, no options


def parsed_and_bound(sql: bytes) -> bytes:
    return STARTUP + message(b"P", b"s1", sql, b"") + message(b"B", b"", b"s1", b"")


@pytest.mark.parametrize(
    ("functions", "sql", "cut"),
    [
        (["noeta_append"], b"SELECT noeta_append_model_called($1)", False),
        (["noeta_append"], b"SELECT noeta_append ($1, $2)", True),
        (["noeta_append_model_called"], b"SELECT * FROM noeta_append_model_called($1)", True),
        (["noeta_append_model_called"], b"SELECT noeta_append_model_called_keeping_claim()", False),
        (["noeta_fence", "noeta_deliver"], b"SELECT public.NOETA_DELIVER($1)", True),
        (["noeta_deliver"], b"SELECT my_noeta_deliver($1)", False),
    ],
)
def test_a_statement_is_cut_only_if_it_calls_a_function_by_a_listed_name(
    functions: list[str], sql: bytes, cut: bool
) -> None:
    assert FrontendReader(functions).feed(parsed_and_bound(sql)) is cut


def test_the_proxy_wants_the_names_of_functions() -> None:
    with pytest.raises(ValueError, match="SQL function names"):
        FaultProxy("127.0.0.1", 1, cut_functions=["noeta_append("])


async def test_an_append_through_a_function_not_listed_is_not_cut(migrated_url: str) -> None:
    parts = conninfo_to_dict(migrated_url)
    proxy = FaultProxy(str(parts["host"]), int(parts["port"]), ["noeta_append_and_finish"])
    proxy.start()
    try:
        dsn = make_conninfo(migrated_url, host="127.0.0.1", port=str(proxy.port))
        store = await PostgresStore.open(dsn, deadline_seconds=1.0, max_connections=1)
        try:
            await store.create_task(created("a"))
            claim = await store.claim("w", ["default"], 30.0)
            assert claim is not None
            proxy.cut_statement(before=True)
            await store.append(claim, 1, [NewEvent("step", 1)])  # noeta_append_and_continue
            assert proxy.statement_cut_pending()
            assert proxy.statements_cut == {"before": 0, "after": 0}
        finally:
            await store.close()
    finally:
        proxy.stop()


async def test_every_function_the_cluster_cuts_exists(migrated_url: str) -> None:
    """A renamed append would leave the cluster's cut faults arming for nothing."""
    async with await psycopg.AsyncConnection.connect(migrated_url) as connection:
        cursor = await connection.execute(
            "SELECT DISTINCT proname FROM pg_proc WHERE proname = ANY(%s)", (list(APPENDS),)
        )
        found = {row[0] for row in await cursor.fetchall()}
    assert found == set(APPENDS)
