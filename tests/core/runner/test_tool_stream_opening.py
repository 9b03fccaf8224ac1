"""A call's output stream is made at its first output (ADR-0142), on a real PostgreSQL: a
call that writes nothing makes no stream at all; one whose first output comes from a
thread (a sync tool) streams it all, in order, then its final; output after the result
landed streams nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from noeta.core.ports.reply_streams import Chunk, Cursor
from noeta.core.ports.store import Store
from noeta.core.runner import tool_streams
from noeta.core.runner.reply_streams import StreamWriter
from tests.client.test_stream import created, store

__all__ = ["store"]  # the fixture, shared


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The calls whose ToolOutputStream was made."""
    calls: list[str] = []
    real = tool_streams.ToolOutputStream

    def counted(*args: Any) -> tool_streams.ToolOutputStream:
        stream = real(*args)
        calls.append(stream.call_id)
        return stream

    monkeypatch.setattr(tool_streams, "ToolOutputStream", counted)
    return calls


async def test_a_call_without_output_makes_no_stream(store: Store, made: list[str]) -> None:
    port = store.capabilities.reply_streams
    assert port is not None
    writer = StreamWriter(port)
    stream = tool_streams.open_tool_stream(writer, "quiet", 3, "call-1")
    assert stream is not None
    stream.landed(4)
    stream.abandon()
    stream.output("stdout", "after its result: nobody reads it")
    await writer.drained()
    assert made == []


async def test_output_from_a_thread_streams_in_order_then_the_final(
    store: Store, made: list[str]
) -> None:
    port = store.capabilities.reply_streams
    assert port is not None
    await created(store, "loud", "scripted:none")
    await port.follow("loud")
    written: list[Chunk] = []

    class Kept:  # the store's port, what it is given to write kept
        async def write_chunks(self, task_id: str, chunks: Sequence[Chunk], *, first: bool) -> None:
            written.extend(chunks)
            await port.write_chunks(task_id, chunks, first=first)

        def __getattr__(self, name: str) -> Any:
            return getattr(port, name)

    writer = StreamWriter(Kept())  # type: ignore[arg-type]
    stream = tool_streams.open_tool_stream(writer, "loud", 3, "call-1")
    assert stream is not None

    def tool() -> None:  # as a sync tool writes, from its thread
        for n in range(20):
            stream.output("stdout", f"{n} ")

    await asyncio.to_thread(tool)
    # The thread's writes reach the loop in its queue's order: one turn takes them all.
    await asyncio.sleep(0)
    stream.landed(4)
    stream.output("stdout", "too late")
    await writer.drained()
    assert made == ["call-1"]
    text = "".join(chunk.data for chunk in written if chunk.kind == "stdout")
    assert text == "".join(f"{n} " for n in range(20))
    assert written[-1].kind == "final"
    # Landed: the text rows went, the final is what a reader finds.
    read = await port.read_chunks("loud", Cursor(), 100)
    assert [chunk.kind for chunk in read.chunks] == ["final"]
