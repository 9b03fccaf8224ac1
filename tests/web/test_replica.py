"""`noeta web --replica`: the pages read from a real streaming replica of the test server
(replay paused there, a task the primary holds is not on its page), with the replica's
lag on every page; actions and the live feed's LISTEN stay on the primary; a stopped
replica is one line on the page while actions still work; bad --replica values."""

from __future__ import annotations

import asyncio
import re
import socket
import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import psycopg
import pytest
from starlette.testclient import TestClient

from noeta.client import AsyncClient
from noeta.core.ports.store import CANCEL_KEY, Store
from noeta.testing.postgres import TestPostgres
from noeta.testing.replica import TestReplica
from noeta.web.live import LiveFeed
from noeta.web.replica import ReadReplica, ReplicaState
from noeta.web.site import Site
from tests.stores.test_postgres_session import kernel_keepalives, server_keepalives
from tests.web.conftest import task_with_log
from tests.web.test_actions import form_fields
from tests.web.test_command import noeta_web


@pytest.fixture(scope="module")
def replica(postgres_server: TestPostgres) -> Iterator[TestReplica]:
    """One standby for every test here: a base backup costs about a second."""
    standby = TestReplica(postgres_server)
    yield standby
    standby.close()


@pytest.fixture
def replica_url(replica: TestReplica, postgres_url: str) -> str:
    """The test's schema, read on the standby (replayed there before the test starts)."""
    replica.wait_replayed()
    return replica.url_for(postgres_url)


def reading(url: str) -> ReadReplica:
    """The pages' replica, with a bound no loaded machine meets: a stop refuses at once."""
    return ReadReplica(url, probe_seconds=60)


def on_replica(replica: TestReplica, query: str) -> object:
    with psycopg.connect(replica.url_for(replica.primary_dsn), autocommit=True) as connection:
        row = connection.execute(query).fetchone()
    return None if row is None else row[0]


def caught_up_line(http: TestClient, replica: TestReplica) -> str:
    """The page's replica line once the standby has replayed everything. The server's
    own background writes (a checkpoint, autovacuum, a standby snapshot) can land between
    a replay and the page's probe, more often on a loaded machine: asked again then."""
    deadline = time.monotonic() + 60
    while True:
        replica.wait_replayed()
        line = status_line(http.get("/tasks").text)
        if "caught up" in line or time.monotonic() > deadline:
            return line


def status_line(html: str) -> str:
    found = re.search(r'<span class="replica" id="replica">([^<]*)</span>', html)
    assert found is not None, "the page says nothing of the replica"
    return found.group(1)


async def test_pages_read_from_the_replica_and_say_its_lag(
    store: Store, web: Callable[..., TestClient], replica: TestReplica, replica_url: str
) -> None:
    await task_with_log(store, "replayed")
    http = web(replica=reading(replica_url))
    assert http.get("/tasks/replayed").status_code == 200
    assert caught_up_line(http, replica).endswith("caught up (all received WAL replayed)")
    on_replica(replica, "SELECT pg_wal_replay_pause()")
    try:
        await task_with_log(store, "not-yet")  # on the primary, not replayed on the standby
        replica.wait_received()
        assert http.get("/tasks/not-yet").status_code == 404  # the page read the standby
        lag = status_line(http.get("/tasks").text)
        assert re.search(r"[\d,]+ bytes of WAL received, not yet replayed; replay lag", lag), lag
    finally:
        on_replica(replica, "SELECT pg_wal_replay_resume()")
    replica.wait_replayed()
    assert http.get("/tasks/not-yet").status_code == 200
    readers = on_replica(
        replica, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'noeta-web'"
    )
    assert isinstance(readers, int) and readers >= 1  # the pages' pool, on the standby


async def test_the_lag_probe_s_connection_probes_an_idle_peer(replica_url: str) -> None:
    # ADR-0129: the probe's connection sits idle between pages, like a worker's sessions.
    probe = reading(replica_url)
    try:
        assert (await probe.state()).in_recovery
        assert probe._connection is not None
        assert kernel_keepalives(probe._connection) == (1, 60, 10, 3)
        # and the replica probes it too (ADR-0154; no user timeout: its version unknown)
        assert await server_keepalives(probe._connection) == ("60", "10", "3", "0")
    finally:
        await probe.close()


async def test_an_action_goes_to_the_primary(
    store: Store, web: Callable[..., TestClient], replica: TestReplica, replica_url: str
) -> None:
    await task_with_log(store, "cancel-me")
    replica.wait_replayed()
    http = web(replica=reading(replica_url))
    fields = form_fields(http.get("/tasks/cancel-me").text, "/tasks/cancel-me/cancel")
    done = http.post("/tasks/cancel-me/cancel", data=fields)
    assert done.status_code == 200 and "cancel requested" in done.text, done.text
    assert [entry.dedupe_key for entry in await store.read_inbox("cancel-me")] == [CANCEL_KEY]


async def test_the_live_feed_listens_on_the_primary(
    store: Store, postgres_url: str, replica_url: str
) -> None:
    site = Site(AsyncClient(postgres_url), replica=reading(replica_url))
    feed = LiveFeed(site)
    try:
        async with feed.watch("heard"):
            listening = await site.primary_store()
            assert listening.capabilities.finishes is not None
            await task_with_log(store, "heard")  # a new task wakes the workers: a NOTIFY
            # A bound, not a step: a standby would never deliver it (no NOTIFY there).
            await asyncio.wait_for(feed.heard(1), 30)
    finally:
        await feed.close()
        await site.client.close()
        assert site.replica is not None
        await site.replica.close()


async def test_a_stopped_replica_is_one_line_and_actions_still_work(
    store: Store, web: Callable[..., TestClient], replica: TestReplica, replica_url: str
) -> None:
    await task_with_log(store, "still-cancellable")
    replica.wait_replayed()
    http = web(replica=reading(replica_url))
    page = http.get("/tasks/still-cancellable").text
    fields = form_fields(page, "/tasks/still-cancellable/cancel")
    replica.stop()
    try:
        away = http.get("/tasks")
        assert away.status_code == 503
        said = re.findall(r'<p class="notice bad">([^<]*)</p>', away.text)
        assert len(said) == 1 and f":{replica.port}/" in said[0], away.text
        assert "is not answering" in said[0] and "actions still go to the primary" in said[0]
        done = http.post("/tasks/still-cancellable/cancel", data=fields)
        assert done.status_code == 200 and "cancel requested" in done.text, done.text
    finally:
        replica.start()
    back = http.get("/tasks/still-cancellable")
    assert back.status_code == 200, back.text  # back once it answers


def test_a_replica_that_is_not_a_postgresql_url_is_a_usage_error() -> None:
    result = noeta_web("--replica", "sqlite:///tmp/x.db", "--store", "sqlite:////nonexistent.db")
    assert result.returncode == 2, result
    assert result.stderr.count("\n") == 1 and "not a PostgreSQL URL" in result.stderr
    assert result.stderr.startswith("noeta: error: Invalid value for '--replica'"), result.stderr


def test_an_unreachable_replica_is_one_line_and_exit_1(postgres_url: str) -> None:
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        away = f"postgresql://noeta@127.0.0.1:{port}/noeta"
        result = noeta_web(
            "--bind", "127.0.0.1:0", "--store", postgres_url, env={"NOETA_WEB_REPLICA": away}
        )
    assert result.returncode == 1, result
    assert result.stderr.count("\n") == 1, result.stderr
    said = f"the read replica (--replica): cannot connect to PostgreSQL at 127.0.0.1:{port}/noeta"
    assert said in result.stderr, result.stderr


def test_a_primary_given_as_the_replica_is_refused(postgres_url: str) -> None:
    result = noeta_web(
        "--bind", "127.0.0.1:0", "--store", postgres_url, env={"NOETA_WEB_REPLICA": postgres_url}
    )
    assert result.returncode == 1, result
    assert result.stderr.count("\n") == 1, result.stderr
    assert "is not a replica: pg_is_in_recovery() is false there" in result.stderr


def test_the_lag_line_says_a_promoted_or_unstreaming_replica() -> None:
    where = "127.0.0.1:5433/noeta"
    promoted = ReplicaState(where, False, None, None, True)
    assert promoted.line() == f"replica {where} is not in recovery: it is a primary now"
    lost = ReplicaState(where, True, timedelta(seconds=12.5), None, False)
    assert lost.line() == (
        f"replica {where}: receives no WAL by streaming; replay lag 12.5 s (last replayed commit)"
    )
