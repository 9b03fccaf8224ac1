"""A reader that comes back with a cursor (issue 34): where its stream's rows are still
there it goes on where it was, told nothing; where they are gone, as a crash of the
server empties the unlogged table, it is told "restarted" with `lost_text` before any
text, and `tail --follow`'s printer says the text above is void and prints the log's
reply whole. Against a real runner streaming from the Anthropic fake, one store."""

from __future__ import annotations

import asyncio
import io

import psycopg

from noeta.cli.reply_printer import ReplyPrinter
from noeta.cli.status_line import NoStatus
from noeta.client import AsyncClient
from noeta.client.stream_items import (
    StreamFinal,
    StreamFinished,
    StreamItem,
    StreamRestarted,
    StreamText,
)
from noeta.core.ports.reply_streams import Chunk, Cursor
from noeta.core.ports.store import Store
from noeta.testing.fake_providers import FakeAnthropic, Reply
from tests.client.test_stream import (
    LONG_TEXT,
    created,
    provider,
    run_task,
    store,
    stored_reply,
    streams_of,
)

__all__ = ["store"]  # the fixture, shared


async def first_text(reader: AsyncClient, task_id: str, after: Cursor | None) -> StreamItem:
    """The first item a reader from `after` is given (its stream closed after it)."""
    stream = reader.stream(task_id, after=after)
    try:
        return await asyncio.wait_for(anext(stream), 60)
    finally:
        await stream.aclose()


async def test_a_cursor_whose_rows_are_there_resumes_where_it_was(
    postgres_url: str, store: Store
) -> None:
    """Rows as a worker's writer writes them (through the store's port): back with the
    first row's cursor, the reader gets the second row's text and no marker."""
    await created(store, "there", "anthropic:test-model")
    rows = [Chunk(1, 1, n + 1, "text", 0, 9 * n, LONG_TEXT[9 * n : 9 * n + 9]) for n in range(3)]
    await streams_of(store).write_chunks("there", rows, first=True)
    async with AsyncClient(postgres_url, start_embedded=False) as client:
        first = await first_text(client, "there", None)
        resumed = await first_text(client, "there", first.cursor)  # type: ignore[union-attr]
    assert first == StreamText(LONG_TEXT[:9], 0, Cursor(1, 1, 1))
    assert resumed == StreamText(LONG_TEXT[9:18], 0, Cursor(1, 1, 2))


async def test_a_cursor_whose_rows_are_gone_is_told_the_text_was_lost(
    postgres_url: str, store: Store
) -> None:
    """Rows as a worker's writer writes them; the table emptied as the server's crash
    recovery empties it, and the writer going on with its next row and offset."""
    await created(store, "gone", "anthropic:test-model")
    port = streams_of(store)
    rows = [Chunk(1, 1, n + 1, "text", 0, 9 * n, LONG_TEXT[9 * n : 9 * n + 9]) for n in range(3)]
    await port.write_chunks("gone", rows, first=True)
    async with AsyncClient(postgres_url, start_embedded=False) as client:
        first = await first_text(client, "gone", None)
        await truncate(postgres_url)
        later = Chunk(1, 1, 4, "text", 0, 27, LONG_TEXT[27:36])
        await port.write_chunks("gone", [later], first=False)
        then = await two_items(client, "gone", first.cursor)  # type: ignore[union-attr]
    lost = StreamRestarted(1, 1, True, Cursor(1, 1, 3))  # resuming after it gives row 4
    assert then == [lost, StreamText(LONG_TEXT[27:36], 0, Cursor(1, 1, 4))]
    async with AsyncClient(postgres_url, start_embedded=False) as client:
        assert await first_text(client, "gone", lost.cursor) == then[1]


async def test_a_stream_emptied_under_a_running_reply_ends_with_the_stored_reply(
    postgres_url: str, store: Store
) -> None:
    """The same with a runner streaming from the Anthropic fake: the table emptied while
    the provider pauses, its text up to the pause written. A reader arriving after that
    is told the text was lost before any text (the rows it gets do not start the reply),
    and ends with the stored reply; `tail --follow`'s printer says so, then prints it."""
    with FakeAnthropic() as server:
        server.script(Reply(text=LONG_TEXT, piece_chars=9, pause_after=14))
        await created(store, "back", "anthropic:test-model")
        await streams_of(store).follow("back")
        running = asyncio.ensure_future(
            run_task(store, "back", provider("anthropic", server.base_url))
        )
        await asyncio.to_thread(server.paused.wait, 60)
        paused = LONG_TEXT[: (14 - 3) * 9]  # the events before the text: start, block, ping
        async with asyncio.timeout(60):  # polls the store's state; no timed wait
            while True:
                if "".join(row.data for row in await rows_of(store, "back")) == paused:
                    break
                await asyncio.sleep(0.05)
        await truncate(postgres_url)
        async with AsyncClient(postgres_url, start_embedded=False) as client:
            reading = asyncio.ensure_future(all_items(client, "back"))
            await read_once(client, "back")  # attached while the task runs, then on
            server.resume.set()
            items = await asyncio.wait_for(reading, 60)
        await asyncio.wait_for(running, 60)

    assert isinstance(items[0], StreamRestarted) and items[0].lost_text, items[:2]
    seq, stored = await stored_reply(store, "back")
    final = next(item for item in items if isinstance(item, StreamFinal))
    assert (final.event_seq, final.text) == (seq, stored) and stored == LONG_TEXT
    assert items[-1] == StreamFinished("done")
    # What `tail --follow` prints of it: the marker, then the log's reply whole.
    out = io.StringIO()
    printer = ReplyPrinter(NoStatus(), out)
    for item in items:
        printer.take(item)
    printed = out.getvalue()
    assert "↺ the text above is void: part of the text was lost" in printed, printed
    assert printed.rstrip().endswith(LONG_TEXT.rstrip())


async def test_a_reader_attached_while_the_reply_ran_gets_it_from_the_log_if_no_row_came(
    postgres_url: str, store: Store
) -> None:
    """The table refuses every row, so the stream is never written and its worker writes
    no final (as one that died between the task's finish and its final row): a reader
    attached while the task ran ends with the stored reply, from the log, then the
    finish; one that comes after the finish gets the finish alone."""
    with FakeAnthropic() as server:
        server.script(Reply(text=LONG_TEXT, piece_chars=9, pause_after=14))
        await created(store, "unwritten", "anthropic:test-model")
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
            await admin.execute("ALTER TABLE stream_chunks ADD CONSTRAINT refused CHECK (false)")
        await streams_of(store).follow("unwritten")
        running = asyncio.ensure_future(
            run_task(store, "unwritten", provider("anthropic", server.base_url))
        )
        await asyncio.to_thread(server.paused.wait, 60)
        async with AsyncClient(postgres_url, start_embedded=False) as client:
            reading = asyncio.ensure_future(all_items(client, "unwritten"))
            await read_once(client, "unwritten")
            server.resume.set()
            items = await asyncio.wait_for(reading, 60)
            await asyncio.wait_for(running, 60)
            late = await all_items(client, "unwritten")

    seq, stored = await stored_reply(store, "unwritten")
    assert [type(item) for item in items] == [StreamFinal, StreamFinished], items
    final = items[0]
    assert isinstance(final, StreamFinal)
    assert (final.event_seq, final.event_type, final.text) == (seq, "ModelReplied", stored)
    assert items[-1] == StreamFinished("done") and late == [StreamFinished("done")]


async def all_items(reader: AsyncClient, task_id: str) -> list[StreamItem]:
    return [item async for item in reader.stream(task_id)]


async def read_once(reader: AsyncClient, task_id: str) -> None:
    """Until the reader's feed of the task has read the store once (so it reads on while
    the task runs, not after it ended, when a reader gets only `StreamFinished`)."""
    async with asyncio.timeout(60):  # polls the feed's state; no timed wait
        while True:
            feeds = reader._feeds._feeds if reader._feeds is not None else {}
            feed = feeds.get(task_id)
            if feed is not None and feed.version > 0:
                return
            await asyncio.sleep(0.01)


async def truncate(url: str) -> None:
    """Empty the unlogged table, as the server's crash recovery does."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
        await admin.execute("TRUNCATE stream_chunks")


async def two_items(reader: AsyncClient, task_id: str, after: Cursor) -> list[StreamItem]:
    stream = reader.stream(task_id, after=after)
    try:
        return [await asyncio.wait_for(anext(stream), 60) for _ in range(2)]
    finally:
        await stream.aclose()


async def rows_of(store: Store, task_id: str) -> list[Chunk]:
    read = await streams_of(store).read_chunks(task_id, Cursor(), 1000)
    return [row for row in read.chunks if row.kind == "text"]
