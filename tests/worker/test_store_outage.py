"""The worker while its PostgreSQL is stopped for real, then started again (SPEC §3):
renewals fail until the worker's own lease deadline, work in progress stops, and once
the store is back and the lease has lapsed the task is claimed again and finished."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from psycopg.conninfo import make_conninfo

from noeta.backends.stores import open_store
from noeta.backends.stores.embedded import EmbeddedPostgres
from noeta.client import AsyncClient
from noeta.client.stream_items import (
    StreamFinal,
    StreamFinished,
    StreamItem,
    StreamRestarted,
    StreamText,
)
from noeta.core.errors import StoreError
from noeta.core.ports.store import Claim, NewEvent, NewTask, Store
from noeta.core.ports.tool import BackgroundJob
from noeta.core.rules import events
from noeta.testing.fake_providers import FakeAnthropic, Reply
from noeta.worker.jobs import JobManager
from tests.client.test_stream import provider, run_task

from .conftest import WorkerProcess, add_task, lapse_the_lease, log_types, status_of, until


@pytest.fixture
async def store(private_server: EmbeddedPostgres) -> AsyncIterator[Store]:
    store = await open_store(private_server.start(), migrate=True)
    yield store
    await store.close()


async def until_done_after_the_outage(store: Store, task_id: str, what: str) -> None:
    async def done() -> bool:
        try:
            return await status_of(store, task_id) == "done"
        except StoreError:  # our own pool is reconnecting too
            return False

    await until(done, what, within=60)


async def until_waiting_for_the_database(worker: WorkerProcess) -> None:
    async def waiting() -> bool:
        return "waiting for it" in worker.log()

    await until(waiting, "the worker says it waits for the database", within=60)


@pytest.mark.slow
async def test_a_stopped_database_stops_the_work_and_a_restart_resumes_it(
    store: Store,
    private_server: EmbeddedPostgres,
    tmp_path: Path,
    workers: Callable[..., WorkerProcess],
) -> None:
    url = private_server.start()
    sleepy = {"tool_calls": [{"id": "c1", "name": "Bash", "input": {"command": "sleep 2"}}]}
    await add_task(store, tmp_path, "t", sleepy, {"text": "finished after the outage"})
    worker = workers(url, "w", lease=2)

    async def tool_started() -> bool:
        return "ToolStarted" in await log_types(store, "t")

    await until(tool_started, "the tool starts")
    private_server.stop(mode="immediate")

    def gave_up() -> bool:
        text = worker.log()
        return "could not renew for a whole lease" in text or "store unavailable" in text

    async def noticed() -> bool:
        return gave_up()

    await until(noticed, "the worker stops working on the task", within=40)
    private_server.start()  # the same port: the worker's DSN still points at it

    await until_done_after_the_outage(store, "t", "the task is claimed again and finished")
    task = await store.get_task("t")
    assert task is not None and task.owner_epoch == 2
    finished = [e.data for e in await store.read_log("t") if e.type == "ToolFinished"]
    # The tool returned during the outage: its worker keeps the result beside the log if
    # the store is back by then (handed over: "late", ADR-040), else it is "unknown".
    assert len(finished) == 1 and finished[0]["recovery"] in ("late", "unknown")  # type: ignore[index]


@pytest.mark.slow
async def test_a_job_result_is_delivered_once_the_stopped_database_is_back(
    store: Store, private_server: EmbeddedPostgres, tmp_path: Path
) -> None:
    await add_task(store, tmp_path, "t", {"text": "unused"})
    private_server.stop(mode="immediate")
    failed, delivered = asyncio.Event(), asyncio.Event()

    class FirstFailure(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "not delivered yet" in record.getMessage():
                failed.set()

    handler = FirstFailure()
    logging.getLogger("noeta.worker.jobs").addHandler(handler)
    try:
        jobs = JobManager(store, on_result=lambda claim: delivered.set())
        claim = Claim("t", "w", 1, datetime.now(UTC))  # the job is keyed by it, nothing more
        jobs.start(claim, "j1", BackgroundJob("echo done", str(tmp_path), 10))
        await asyncio.wait_for(failed.wait(), 60)
        private_server.start()  # the same port: the store's DSN still points at it
        await asyncio.wait_for(delivered.wait(), 60)
    finally:
        logging.getLogger("noeta.worker.jobs").removeHandler(handler)
    (entry,) = await store.read_inbox("t")  # once: a retry after an unknown commit is deduped
    assert isinstance(entry.payload, dict)
    assert (entry.payload["job_id"], entry.payload["exit_code"]) == ("j1", 0)
    assert "done" in str(entry.payload["output"])


async def test_a_database_restart_mid_stream_loses_only_the_preview(
    store: Store, private_server: EmbeddedPostgres
) -> None:
    """PostgreSQL stopped (immediate: the unlogged chunks and follows are emptied) and
    started again while a reply streams: the reader reconnects and follows again, is told
    of any text lost or any takeover, and the reply lands whole, its final equal to the
    log's."""
    url = private_server.start()
    text = "Streamed across a database restart. " * 12
    with FakeAnthropic() as server:
        # The second, if the first's claim went with the server and it is sent again.
        server.script(Reply(text=text, piece_chars=8, pause_after=10), Reply(text=text))
        created = events.TaskCreated(model="anthropic:test-model", prompt="stream")
        await store.create_task(NewTask("p", [NewEvent(*events.encode(created))]))
        port = store.capabilities.reply_streams
        assert port is not None
        await port.follow("p")
        items: list[StreamItem] = []
        async with AsyncClient(url, start_embedded=False) as client:
            reader = client.stream("p")
            running = asyncio.ensure_future(
                run_task(store, "p", provider("anthropic", server.base_url))
            )
            while not any(isinstance(item, StreamText) for item in items):
                items.append(await asyncio.wait_for(anext(reader), 60))
            assert await asyncio.to_thread(server.paused.wait, 60)
            private_server.stop(mode="immediate")
            private_server.start()  # the same port: every pool and listener reconnects
            server.resume.set()
            with contextlib.suppress(StoreError):
                await asyncio.wait_for(running, 90)
            taken_over = await status_of(store, "p") != "done"
            if taken_over:
                # Its append met a connection the restart broke: the claim is lost, and
                # the task is taken over, as a worker would after the lease.
                await lapse_the_lease(url, "p")
                await run_task(store, "p", provider("anthropic", server.base_url))
            async for item in reader:
                items.append(item)
    stored = [e for e in await store.read_log("p") if e.type == "ModelReplied"]
    final = next(item for item in items if isinstance(item, StreamFinal))
    assert (final.event_seq, final.text) == (stored[0].seq, text)
    assert items[-1] == StreamFinished("done")
    # What came after the restart joins what came before, or the reader was told it
    # does not (a gap: the rows written before the restart were lost).
    shown = "".join(item.text for item in items if isinstance(item, StreamText))
    restarted = [item for item in items if isinstance(item, StreamRestarted)]
    if restarted:
        return  # a takeover's stream, or what followed a gap, comes after its marker
    if taken_over:
        # The takeover may record the reply its first worker kept, without sending the
        # request again (ADR-040): nothing more streams, the final brings the rest. What
        # was shown is the reply's beginning, nothing out of place.
        assert text.startswith(shown)
    else:
        assert shown == text


# What a stopping worker writes for each of its housekeeping writes that failed.
_FAILED_HOUSEKEEPING = ("could not release task", "could not leave the idle registry")


@pytest.mark.slow
async def test_a_worker_stopping_through_an_outage_waits_out_one_housekeeping_write_not_each(
    store: Store,
    private_server: EmbeddedPostgres,
    tmp_path: Path,
    workers: Callable[..., WorkerProcess],
) -> None:
    # Each write waited out the store's deadline (10 s): a worker of many tasks stopping
    # through an outage outlived the 30 s a container platform gives it (ADR-0156).
    url = private_server.start()
    sleepy = {"tool_calls": [{"id": "c1", "name": "Bash", "input": {"command": "sleep 60"}}]}
    for task_id in ("a", "b", "c"):
        await add_task(store, tmp_path, task_id, sleepy, {"text": "never"})
    worker = workers(url, "w", lease=30, concurrency=3, grace=0)

    async def tools_started() -> bool:
        return all(["ToolStarted" in await log_types(store, t) for t in ("a", "b", "c")])

    await until(tools_started, "the three tools start")
    private_server.stop(mode="immediate")
    worker.signal(signal.SIGTERM)
    assert await worker.exit_code(within=60) == 0
    text = worker.log()
    assert sum(text.count(line) for line in _FAILED_HOUSEKEEPING) == 1, text
    assert "not handed back" in text and "worker w: stopped" in text


@pytest.mark.slow
async def test_a_worker_whose_claims_found_the_database_unreachable_stops_without_trying_again(
    store: Store,
    private_server: EmbeddedPostgres,
    workers: Callable[..., WorkerProcess],
) -> None:
    worker = workers(private_server.start(), "w")

    async def listening() -> bool:
        return "listening for wake-ups" in worker.log()

    await until(listening, "the worker is idle")
    private_server.stop(mode="immediate")

    async def claim_failed() -> bool:
        return "claim: cannot reach PostgreSQL" in worker.log()

    await until(claim_failed, "a claim finds the database unreachable", within=60)
    worker.signal(signal.SIGTERM)
    assert await worker.exit_code(within=60) == 0
    text = worker.log()
    assert not any(line in text for line in _FAILED_HOUSEKEEPING), text
    assert "worker w: stopped" in text


@pytest.mark.slow
async def test_a_worker_started_before_its_database_waits_for_it_then_works(
    store: Store,
    private_server: EmbeddedPostgres,
    tmp_path: Path,
    workers: Callable[..., WorkerProcess],
) -> None:
    # It exited with its one line, and a container platform restarted it with ever longer
    # pauses: a fleet started during an outage came back minutes after the database (ADR-0157).
    url = private_server.start()
    await add_task(store, tmp_path, "t", {"text": "after the wait"})
    private_server.stop(mode="fast")
    worker = workers(url, "w")

    await until_waiting_for_the_database(worker)
    private_server.start()
    await until_done_after_the_outage(store, "t", "the worker connects and runs the task")
    text = worker.log()
    assert text.count("waiting for it") == 1, text
    assert "connected to PostgreSQL after waiting" in text


@pytest.mark.slow
async def test_a_worker_waiting_for_its_database_stops_on_sigterm(
    private_server: EmbeddedPostgres, workers: Callable[..., WorkerProcess]
) -> None:
    url = private_server.start()
    private_server.stop(mode="fast")
    worker = workers(url, "w")

    await until_waiting_for_the_database(worker)
    worker.signal(signal.SIGTERM)
    assert await worker.exit_code(within=30) == 0
    assert "worker w: stopped" in worker.log()


async def test_a_worker_whose_password_the_database_refuses_exits_at_once(
    postgres_url: str, workers: Callable[..., WorkerProcess]
) -> None:
    # A server that answered and refused is a setting to mend, not an outage to wait out.
    wrong = make_conninfo(postgres_url, password="not-the-password")
    worker = workers(wrong, "w")
    assert await worker.exit_code(within=60) == 1
    text = worker.log()
    assert "password authentication failed" in text and "waiting" not in text
    assert "not-the-password" not in text
