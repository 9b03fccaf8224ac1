"""A worker SIGKILLed mid-stream (issue 34): its successor sends the request again, and a
reader following the task is told "restarted" with the new call, then sees the new
stream only, and a final whose text is the reply stored in the log."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable

from noeta.client import AsyncClient
from noeta.client.stream_items import (
    StreamFinal,
    StreamFinished,
    StreamItem,
    StreamRestarted,
    StreamText,
    reply_text,
)
from noeta.core.ports.store import NewEvent, NewTask, Store
from noeta.core.rules import events
from noeta.testing.fake_providers import FakeAnthropic, Reply

from .conftest import WorkerProcess, lapse_the_lease

DEAD_TEXT = "Words of the attempt that dies. " * 10
LANDED_TEXT = "Words of the attempt that lands."


async def test_a_reader_sees_the_restart_then_a_final_equal_to_the_stored_reply(
    postgres_url: str, store: Store, workers: Callable[..., WorkerProcess]
) -> None:
    with FakeAnthropic() as server:
        server.script(Reply(text=DEAD_TEXT, piece_chars=6, pause_after=10), Reply(text=LANDED_TEXT))
        created = events.TaskCreated(model="anthropic:test-model", prompt="say something")
        await store.create_task(NewTask("k", [NewEvent(*events.encode(created))]))
        env = {"ANTHROPIC_API_KEY": "sk-test-key", "ANTHROPIC_BASE_URL": server.base_url}
        items: list[StreamItem] = []
        async with AsyncClient(postgres_url, start_embedded=False) as client:
            reader = client.stream("k")
            first = asyncio.ensure_future(anext(reader))  # the reader follows from here
            port = store.capabilities.reply_streams
            assert port is not None
            await port.follow("k")  # as the feed does, before the worker streams
            dying = workers(postgres_url, "dying", lease=30, env=env)
            items.append(await asyncio.wait_for(first, 120))
            while not isinstance(items[-1], StreamText):
                items.append(await asyncio.wait_for(anext(reader), 120))
            assert await asyncio.to_thread(server.paused.wait, 60)
            dying.signal(signal.SIGKILL)
            assert await dying.exit_code() == -signal.SIGKILL
            server.resume.set()  # the paused reply goes on into a closed socket
            await lapse_the_lease(postgres_url, "k")
            workers(postgres_url, "successor", lease=30, env=env)
            async for item in reader:
                items.append(item)
    restart = next(i for i, item in enumerate(items) if isinstance(item, StreamRestarted))
    before = "".join(item.text for item in items[:restart] if isinstance(item, StreamText))
    after = "".join(item.text for item in items[restart:] if isinstance(item, StreamText))
    assert before and DEAD_TEXT.startswith(before) and len(before) < len(DEAD_TEXT)
    assert after in ("", LANDED_TEXT)  # none at all if the reply landed before a read
    stored = [e for e in await store.read_log("k") if e.type == "ModelReplied"]
    final = next(item for item in items if isinstance(item, StreamFinal))
    assert (final.event_seq, final.text) == (stored[0].seq, LANDED_TEXT)
    assert reply_text(events.decode(stored[0].type, stored[0].data)) == LANDED_TEXT
    called = [e.seq for e in await store.read_log("k") if e.type == "ModelCalled"]
    marker = items[restart]
    assert isinstance(marker, StreamRestarted) and marker.call_seq == called[-1]
    assert items[-1] == StreamFinished("done")
    assert len(server.requests) == 2 and server.requests[0].body == server.requests[1].body
