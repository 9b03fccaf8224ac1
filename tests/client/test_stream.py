"""`AsyncClient.stream` against a real worker's runner, a real PostgreSQL and the provider
fakes at the wire: text grows while the reply streams, then a final equal to the stored
reply, then the finish; a retried attempt's text is declared void, never given as new."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from noeta.backends.stores import open_store
from noeta.client import AsyncClient, Client
from noeta.client.stream_items import (
    StreamFinal,
    StreamFinished,
    StreamItem,
    StreamRestarted,
    StreamText,
    reply_text,
)
from noeta.core.ports.model import Provider
from noeta.core.ports.reply_streams import ReplyStreams
from noeta.core.ports.store import NewEvent, NewTask, Store
from noeta.core.rules import events
from noeta.core.runner.task import TaskRunner
from noeta.testing.fake_providers import FakeAnthropic, FakeOpenAI, HttpError, RawStream, Reply
from tests.core.runner.test_http_providers import Registry, provider

LONG_TEXT = "The quick brown fox jumps over the lazy dog. " * 8


async def no_sleep(seconds: float) -> None:
    await asyncio.sleep(0)


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[Store]:
    store = await open_store(postgres_url, migrate=True)
    yield store
    await store.close()


@pytest.fixture(params=["anthropic", "openai"])
def fake(request: pytest.FixtureRequest) -> Iterator[tuple[str, FakeAnthropic | FakeOpenAI]]:
    server = FakeAnthropic() if request.param == "anthropic" else FakeOpenAI()
    with server:
        yield request.param, server


def streams_of(store: Store) -> ReplyStreams:
    port = store.capabilities.reply_streams
    assert port is not None
    return port


async def created(store: Store, task_id: str, model: str) -> None:
    task = events.TaskCreated(model=model, prompt="write a long answer")
    await store.create_task(NewTask(task_id, [NewEvent(*events.encode(task))]))


async def run_task(store: Store, task_id: str, chosen: Provider) -> TaskRunner:
    claim = await store.claim_task("w", task_id, 120)
    assert claim is not None
    runner = TaskRunner(store, Registry(chosen), sleep=no_sleep)
    try:
        await runner.run(claim)
    finally:
        await chosen.close()
    return runner


async def stored_reply(store: Store, task_id: str) -> tuple[int, str]:
    for stored in await store.read_log(task_id):
        if stored.type == "ModelReplied":
            return stored.seq, reply_text(events.decode(stored.type, stored.data))
    raise AssertionError("no reply in the log")


async def test_a_reader_sees_the_text_grow_then_a_final_equal_to_the_stored_reply(
    postgres_url: str, store: Store, fake: tuple[str, FakeAnthropic | FakeOpenAI]
) -> None:
    kind, server = fake
    server.script(Reply(text=LONG_TEXT, piece_chars=9, pause_after=12))
    await created(store, "s", f"{kind}:test-model")
    await streams_of(store).follow("s")  # as the reader's feed does: the worker writes
    items: list[StreamItem] = []
    async with AsyncClient(postgres_url, start_embedded=False) as client:
        reader = client.stream("s")
        running = asyncio.ensure_future(run_task(store, "s", provider(kind, server.base_url)))
        # Text comes while the provider is still paused mid-reply: it grows as it streams.
        seen = ""
        while not seen:
            item = await asyncio.wait_for(anext(reader), 60)
            items.append(item)
            if isinstance(item, StreamText):
                seen += item.text
        assert LONG_TEXT.startswith(seen) and len(seen) < len(LONG_TEXT)
        assert server.paused.is_set() and not server.resume.is_set()
        server.resume.set()
        async for item in reader:
            items.append(item)
        runner = await asyncio.wait_for(running, 60)
    finals = [item for item in items if isinstance(item, StreamFinal)]
    assert len(finals) == 1
    seq, text = await stored_reply(store, "s")
    assembled = "".join(item.text for item in items if isinstance(item, StreamText))
    assert (finals[0].event_seq, finals[0].text) == (seq, text)
    assert assembled == text == LONG_TEXT
    assert not any(isinstance(item, StreamRestarted) for item in items)
    assert items[-1] == StreamFinished("done")
    # Once the reply is in the log its text rows go: one final row remains.
    assert runner.streams is not None
    await asyncio.wait_for(runner.streams.drained(), 60)
    left = await streams_of(store).read_chunks("s", type(finals[0].cursor)(), 100)
    assert [chunk.kind for chunk in left.chunks] == ["final"]


async def test_a_retried_attempt_is_marked_restarted_and_its_text_never_given_again(
    postgres_url: str, store: Store
) -> None:
    """The provider's stream breaks mid-reply (a 5xx-like drop) and is retried within the
    call: readers are told "restarted" with attempt 2, then get attempt 2's text only."""
    with FakeAnthropic() as server:
        first = server.stream_of(Reply(text="A dead attempt's words. " * 4, piece_chars=5))
        server.script(RawStream(tuple(first[:8]), end="drop"), Reply(text="Fresh words."))
        await created(store, "r", "anthropic:test-model")
        await streams_of(store).follow("r")
        items: list[StreamItem] = []
        async with AsyncClient(postgres_url, start_embedded=False) as client:
            running = asyncio.ensure_future(
                run_task(store, "r", provider("anthropic", server.base_url))
            )
            async for item in client.stream("r"):
                items.append(item)
            await asyncio.wait_for(running, 60)
    seq, text = await stored_reply(store, "r")
    final = next(item for item in items if isinstance(item, StreamFinal))
    assert (final.event_seq, final.text) == (seq, text) == (final.event_seq, "Fresh words.")
    after_restart: list[StreamItem] = []
    for item in items:  # what a reader shows: the text since the last restart
        after_restart = [] if isinstance(item, StreamRestarted) else [*after_restart, item]
    shown = "".join(item.text for item in after_restart if isinstance(item, StreamText))
    assert shown in ("", "Fresh words.")  # none at all if attempt 2 landed before a read


async def test_a_cursor_whose_stream_is_gone_is_answered_from_the_log(
    postgres_url: str, store: Store
) -> None:
    with FakeOpenAI() as server:
        server.script(HttpError(500), Reply(text="All of it."))
        await created(store, "g", "openai:test-model")
        await run_task(store, "g", provider("openai", server.base_url))
    seq, text = await stored_reply(store, "g")
    async with AsyncClient(postgres_url, start_embedded=False) as client:
        items = [item async for item in client.stream("g", after="2.1.3")]
    assert items[0] == StreamFinal(seq, "ModelReplied", text, items[0].cursor)  # type: ignore[union-attr]
    assert text == "All of it." and items[-1] == StreamFinished("done")


async def test_an_unknown_task_and_a_bad_cursor_are_clear_errors(
    postgres_url: str, store: Store
) -> None:
    async with AsyncClient(postgres_url, start_embedded=False) as client:
        with pytest.raises(Exception, match="nope"):
            async for _ in client.stream("nope"):
                pass
        with pytest.raises(ValueError, match="three numbers"):
            async for _ in client.stream("nope", after="1.x"):
                pass


async def test_a_store_without_streams_gives_the_finish_from_the_log(tmp_path: Path) -> None:
    """sqlite keeps no stream: `stream` reads the log, and ends with the task."""
    url = f"sqlite:///{tmp_path / 'tasks.db'}"
    store = await open_store(url, migrate=True)
    try:
        assert store.capabilities.reply_streams is None
        with FakeOpenAI() as server:
            server.script(Reply(text="From the log."))
            await created(store, "q", "openai:test-model")
            await run_task(store, "q", provider("openai", server.base_url))
    finally:
        await store.close()
    async with AsyncClient(url, start_embedded=False) as client:
        items = [item async for item in client.stream("q")]
    assert items == [StreamFinished("done")]
    with Client(url) as sync_client:
        assert list(sync_client.stream("q")) == [StreamFinished("done")]
