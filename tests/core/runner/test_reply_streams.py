"""The worker's side of streamed replies (ADR-0105), on a real PostgreSQL against the
provider fake: a followed reply is written in a few flushes, not a statement per delta;
a reply nobody follows writes nothing at all, and in a listening worker starts nothing
until a follow comes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import psycopg

from noeta.backends.stores.postgres import PostgresStore
from noeta.core.ports.model import TextDelta
from noeta.core.ports.reply_streams import Chunk, Cursor, ReplyStreams
from noeta.core.ports.store import Store
from noeta.core.runner.reply_streams import StreamWriter
from noeta.core.runner.task import TaskRunner
from noeta.testing.fake_providers import FakeOpenAI, Reply
from tests.client.test_stream import created, no_sleep, store
from tests.core.runner.test_http_providers import Registry, provider
from tests.worker.conftest import until

__all__ = ["store"]  # the fixture, shared

TEXT = "one token at a time " * 40  # 800 characters in 200 deltas of 4


class Counted:
    """The store's port, its writes counted."""

    def __init__(self, port: ReplyStreams) -> None:
        self.port = port
        self.flushes: list[int] = []  # the rows of each write
        self.removals = 0

    async def write_chunks(self, task_id: str, chunks: Sequence[Chunk], *, first: bool) -> None:
        self.flushes.append(len(chunks))
        await self.port.write_chunks(task_id, chunks, first=first)

    async def remove_text(self, task_id: str, call_seq: int, call_id: str = "") -> None:
        self.removals += 1
        await self.port.remove_text(task_id, call_seq, call_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.port, name)


async def run_counted(store: Store, task_id: str, *, followed: bool) -> Counted:
    port = store.capabilities.reply_streams
    assert port is not None
    counted = Counted(port)
    await created(store, task_id, "openai:test-model")
    if followed:
        await port.follow(task_id)
    with FakeOpenAI() as server:
        server.part_seconds = 0.005  # 200 deltas over a second at least, as a model paces
        server.script(Reply(text=TEXT, piece_chars=4))
        claim = await store.claim_task("w", task_id, 120)
        assert claim is not None
        chosen = provider("openai", server.base_url)
        writer = StreamWriter(counted)  # type: ignore[arg-type]
        try:
            await TaskRunner(store, Registry(chosen), sleep=no_sleep, streams=writer).run(claim)
        finally:
            await chosen.close()
        await writer.drained()
    return counted


async def test_a_followed_reply_is_written_in_a_few_flushes(store: Store) -> None:
    counted = await run_counted(store, "followed", followed=True)
    # 200 deltas over a second or more: the first flush at once, then at most one each
    # 25 ms (fewer on a slow machine: each waits for the one before), and the final's.
    assert 2 <= len(counted.flushes) <= 100 and counted.removals == 1
    port = store.capabilities.reply_streams
    assert port is not None
    left = await port.read_chunks("followed", Cursor(), 100)
    assert [chunk.kind for chunk in left.chunks] == ["final"]


async def test_a_reply_nobody_follows_writes_nothing(store: Store) -> None:
    counted = await run_counted(store, "alone", followed=False)
    assert counted.flushes == [] and counted.removals == 0
    port = store.capabilities.reply_streams
    assert port is not None
    assert (await port.read_chunks("alone", Cursor(), 100)).chunks == ()


@contextlib.asynccontextmanager
async def listening(port: ReplyStreams, task_id: str) -> AsyncIterator[StreamWriter]:
    """A worker's writer, listening for follows (as `noeta worker` runs it), once it knows
    nobody follows `task_id`."""
    writer = StreamWriter(port)
    running = asyncio.ensure_future(writer.listen())
    try:

        async def heard() -> bool:
            return writer.unheard(task_id)

        await until(heard, "the writer listens for follows", within=60)
        yield writer
        await writer.drained()
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


async def until_written(port: ReplyStreams, task_id: str, text: str, what: str) -> None:
    async def shown() -> bool:
        read = await port.read_chunks(task_id, Cursor(), 100)
        return "".join(chunk.data for chunk in read.chunks) == text

    await until(shown, what, within=60)


async def test_a_listening_worker_holds_a_reply_nobody_follows_until_a_follow_comes(
    store: Store,
) -> None:
    port = store.capabilities.reply_streams
    assert port is not None
    await created(store, "held", "openai:test-model")
    async with listening(port, "held") as writer:
        stream = writer.open("held", 1)
        tasks = len(asyncio.all_tasks())
        stream.delta(1, TextDelta(0, "held "))
        stream.delta(1, TextDelta(0, "back"))
        assert len(asyncio.all_tasks()) == tasks  # no flusher, no timer: the text is kept
        await port.follow("held")
        await until_written(port, "held", "held back", "the follow's announcement brings it")
        stream.abandon()


async def test_a_listening_worker_whose_question_failed_asks_again(
    store: Store, postgres_url: str
) -> None:
    """The question a follow's announcement sets off fails (the followers' table locked
    past the store's deadline): the writer asks again, and the follow it had not heard of
    brings the held text out, with no announcement after it."""
    await created(store, "asked", "openai:test-model")
    quick = await PostgresStore.open(postgres_url, deadline_seconds=1)
    port = quick.capabilities.reply_streams
    assert port is not None
    try:
        async with listening(port, "asked") as writer:
            stream = writer.open("asked", 1)
            stream.delta(1, TextDelta(0, "said once"))
            async with (
                await psycopg.AsyncConnection.connect(postgres_url) as locker,
                await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as other,
            ):
                await locker.execute("LOCK TABLE stream_followers IN ACCESS EXCLUSIVE MODE")
                await locker.execute(  # a follow the writer hears of only by its question
                    "INSERT INTO stream_followers (task_id, until) VALUES ('asked', now() + '60s')"
                )
                answered_at = writer._followed_at
                await other.execute("SELECT pg_notify('noeta_stream_follows', '')")

                async def waiting() -> bool:
                    cursor = await other.execute(
                        "SELECT count(*) FROM pg_locks WHERE NOT granted"
                        " AND relation = 'stream_followers'::regclass"
                    )
                    return (await cursor.fetchone() or (0,))[0] > 0

                async def gave_up() -> bool:
                    return not await waiting()

                await until(waiting, "the writer's question waits on the lock", within=60)
                await until(gave_up, "its deadline ended it", within=60)
                await locker.commit()
            assert writer._followed_at == answered_at  # the question had no answer
            await until_written(port, "asked", "said once", "the writer asked again")
            stream.abandon()
    finally:
        await quick.close()
