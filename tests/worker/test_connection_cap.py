"""A worker's server connections do not grow with its concurrency (ADR-0139): at
concurrency 40, with every run waiting on its model, it holds its pool and three more."""

from __future__ import annotations

from collections.abc import Callable

import psycopg

from noeta.cli.bounds import CONNECTIONS_DEFAULT
from noeta.core.ports.store import NewEvent, NewTask, Store
from noeta.core.rules import events
from noeta.testing.fake_providers import FakeAnthropic, Reply

from .conftest import WorkerProcess, status_of, until

RUNS = 40
# Its pool, its renewals' connection (a second only while a round is held up), its
# claims'; the LISTEN is counted apart (its own application name).
MOST = CONNECTIONS_DEFAULT + 3

HELD = """
SELECT count(*) FROM pg_stat_activity
 WHERE application_name = %s AND pid <> pg_backend_pid()
"""


async def held(url: str, application_name: str) -> int:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
        row = await (await admin.execute(HELD, (application_name,))).fetchone()
    assert row is not None
    return int(row[0])


async def test_forty_runs_waiting_on_their_model_share_a_few_connections(
    postgres_url: str, store: Store, workers: Callable[..., WorkerProcess]
) -> None:
    with FakeAnthropic() as server:
        # Each reply stops after its first event until the test lets them all go on: every
        # run is then inside its model call at once.
        server.script(*[Reply(text="done", pause_after=1) for _ in range(RUNS)])
        created = events.TaskCreated(model="anthropic:test-model", prompt="say something")
        for number in range(RUNS):
            await store.create_task(NewTask(f"cap-{number}", [NewEvent(*events.encode(created))]))
        env = {"ANTHROPIC_API_KEY": "sk-test-key", "ANTHROPIC_BASE_URL": server.base_url}
        worker = workers(postgres_url, "cap", lease=30, concurrency=RUNS, env=env)
        try:

            async def all_in_flight() -> bool:
                return len(server.requests) >= RUNS

            await until(all_in_flight, f"{RUNS} model calls are in flight", within=120)
            name = "noeta-worker:cap"
            most = await held(postgres_url, name)
            server.resume.set()

            async def all_done() -> bool:
                nonlocal most
                most = max(most, await held(postgres_url, name))
                states = [await status_of(store, f"cap-{n}") for n in range(RUNS)]
                return all(state == "done" for state in states)

            await until(all_done, f"all {RUNS} tasks are done", within=120)
        finally:
            server.resume.set()
            worker.stop()
    assert 3 <= most <= MOST, f"the worker held {most} connections at concurrency {RUNS}"
    assert len(server.requests) == RUNS  # each model called once: no claim lapsed
