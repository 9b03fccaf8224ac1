"""`noeta web` under test: the app on a real store through Starlette's TestClient, and
tasks whose logs are written through the store's own fenced appends."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Sequence

import pytest
from starlette.testclient import TestClient

from noeta.backends.stores import open_store
from noeta.client import AsyncClient
from noeta.core.ports.store import Claim, NewEvent, NewTask, NextState, Store, Wait
from noeta.core.rules import events
from noeta.web.app import create_app
from noeta.web.site import Site

SCRIPT = "scripted:/nonexistent.yaml"  # never run: these tasks are written by hand
TOKEN = "a-web-token-of-some-length"


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[Store]:
    store = await open_store(postgres_url, migrate=True)
    yield store
    await store.close()


@pytest.fixture
def web(postgres_url: str, store: Store) -> Iterator[Callable[..., TestClient]]:
    """`web(**site_options)`: a TestClient on `noeta web`'s app over the test's store,
    logged in as a browser would be (through /login) unless `login=False`."""
    opened: list[TestClient] = []

    def start(*, login: bool = True, **options: object) -> TestClient:
        options.setdefault("allowed_hosts", ("testserver",))
        options.setdefault("token", TOKEN)
        site = Site(AsyncClient(postgres_url), **options)  # type: ignore[arg-type]
        client = TestClient(create_app(site), follow_redirects=False)
        client.__enter__()
        opened.append(client)
        if login:
            hosts = site.allowed_hosts
            headers = {"Host": hosts[0]} if hosts else {}
            done = client.get("/login", params={"token": site.token}, headers=headers)
            assert done.status_code == 303, done.text
        return client

    yield start
    for client in opened:
        client.__exit__(None, None, None)


def encoded(*happened: events.Event) -> list[NewEvent]:
    return [NewEvent(*events.encode(event)) for event in happened]


async def task_with_log(
    store: Store,
    task_id: str,
    happened: Sequence[events.Event] = (),
    *,
    worker: str = "worker-a",
    interactive: bool = False,
    next_state: NextState | None = None,
) -> Claim:
    """A task created, claimed by `worker` and its `happened` events appended."""
    created = events.TaskCreated(model=SCRIPT, prompt="look around", interactive=interactive)
    assert await store.create_task(NewTask(task_id, encoded(created)))
    claim = await store.claim_task(worker, task_id, 30)
    assert claim is not None
    if happened:
        if next_state is None:
            await store.append(claim, 1, encoded(*happened))
        else:
            await store.append(claim, 1, encoded(*happened), next_state=next_state)
    return claim


WAIT = Wait()
