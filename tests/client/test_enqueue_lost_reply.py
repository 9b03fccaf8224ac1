"""`enqueue` and `enqueue_many` are idempotent by default (issue 29 item 9): the reply of
the create is lost for real (the fault proxy resets the connection after the statement
was sent, so it committed), the client sends the same ids again, finds its own jobs and
returns their handles: one job each, no error (a unique or debounced one too: the resend
finds its own job and replaces nothing). An id found taken by another task is
never mistaken for its own."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from noeta.backends.stores import open_store
from noeta.client import AsyncClient
from noeta.core.errors import ConfigError
from noeta.testing.fault_proxy import FaultProxy
from tests.client import jobs_for_tests

assert jobs_for_tests

CREATES = [
    "noeta_create_task",
    "noeta_create_tasks",
    "noeta_create_tasks_alike",
    "noeta_create_unique_task",
    "noeta_create_unique_tasks",
]


@pytest.fixture
async def migrated(postgres_url: str) -> str:
    await (await open_store(postgres_url, migrate=True)).close()
    return postgres_url


@pytest.fixture
def proxy(migrated: str) -> Iterator[FaultProxy]:
    parts = conninfo_to_dict(migrated)
    proxy = FaultProxy(str(parts["host"]), int(parts["port"]), cut_functions=CREATES)
    proxy.start()
    yield proxy
    proxy.stop()


@pytest.fixture
async def proxied(proxy: FaultProxy, migrated: str) -> AsyncIterator[AsyncClient]:
    url = make_conninfo(migrated, host="127.0.0.1", port=str(proxy.port))
    async with AsyncClient(url) as client:
        yield client


async def test_a_lost_reply_of_enqueue_makes_one_job_and_no_error(
    proxied: AsyncClient, proxy: FaultProxy
) -> None:
    proxy.cut_statement(before=False)
    handle = await proxied.enqueue("resize", {"image": "a.png", "width": 3}, queue="lost")
    assert proxy.statements_cut == {"before": 0, "after": 1}
    listed = await proxied.tasks(queue="lost")
    assert [record.id for record in listed] == [handle.id]


async def test_a_lost_reply_of_enqueue_many_makes_the_batch_once(
    proxied: AsyncClient, proxy: FaultProxy
) -> None:
    proxy.cut_statement(before=False)
    inputs = [{"image": f"{n}.png", "width": n} for n in range(1, 51)]
    handles = await proxied.enqueue_many("resize", inputs, queue="lost-many")
    assert proxy.statements_cut == {"before": 0, "after": 1}
    listed = await proxied.tasks(queue="lost-many", limit=1000)
    assert sorted(record.id for record in listed) == sorted(handle.id for handle in handles)
    assert len(listed) == 50


async def test_after_a_lost_send_an_id_held_by_another_task_is_not_taken_for_ours(
    proxied: AsyncClient, proxy: FaultProxy
) -> None:
    await proxied.enqueue("resize", {"image": "theirs.png", "width": 1}, id="shared", queue="q")
    proxy.cut_statement(before=True)  # never reaches the server: the resend finds "theirs"
    with pytest.raises(ConfigError, match="'shared' exists already"):
        await proxied.enqueue("resize", {"image": "mine.png", "width": 2}, id="shared", queue="q")
    assert proxy.statements_cut == {"before": 1, "after": 0}
    (event,) = [e for e in await (await proxied.store()).read_log("shared") if e.seq == 2]
    assert event.data["input"] == {"image": "theirs.png", "width": 1}  # type: ignore[index,call-overload]


async def test_a_lost_reply_of_a_unique_enqueue_makes_one_job(
    proxied: AsyncClient, proxy: FaultProxy
) -> None:
    proxy.cut_statement(before=False)
    handle = await proxied.enqueue(
        "resize", {"image": "u.png", "width": 1}, queue="u", unique_key="u", unique_for=3600
    )
    assert proxy.statements_cut == {"before": 0, "after": 1}
    assert [record.id for record in await proxied.tasks(queue="u")] == [handle.id]


async def test_a_lost_reply_of_a_debounce_does_not_supersede_the_job_it_made(
    proxied: AsyncClient, proxy: FaultProxy
) -> None:
    first = await proxied.enqueue(
        "resize", {"image": "d.png", "width": 1}, queue="d", unique_key="d", debounce=3600
    )
    proxy.cut_statement(before=False)
    second = await proxied.enqueue(
        "resize", {"image": "d.png", "width": 2}, queue="d", unique_key="d", debounce=3600
    )
    assert proxy.statements_cut == {"before": 0, "after": 1}
    assert [record.id for record in await proxied.tasks(queue="d", status="ready")] == [second.id]
    assert [record.id for record in await proxied.tasks(queue="d", status="cancelled")] == [
        first.id
    ]
    # A batch whose second job supersedes its first: sent again, the first finds itself
    # made (superseded) and answers so, not replacing the second.
    proxy.cut_statement(before=False)
    keyed = await proxied.enqueue_many(
        "resize",
        [{"image": "e.png", "width": 1}, {"image": "e.png", "width": 2}],
        queue="e",
        unique_keys=["e", "e"],
        debounce=3600,
    )
    assert proxy.statements_cut == {"before": 0, "after": 2}
    assert [record.id for record in await proxied.tasks(queue="e", status="ready")] == [keyed[1].id]
    assert [record.id for record in await proxied.tasks(queue="e", status="cancelled")] == [
        keyed[0].id
    ]
