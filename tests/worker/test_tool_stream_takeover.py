"""A worker SIGKILLed while a Bash command streams (issue 34 item 2): Bash is not safe to
run again, so its successor records the call as cut (outcome unknown); a reader following
the task saw the output written before the kill, is told "lost" with the event that
records the cut, and never gets that output again as new."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable
from pathlib import Path

from noeta.client import AsyncClient
from noeta.client.stream_items import (
    StreamFinal,
    StreamFinished,
    StreamItem,
    StreamLost,
    StreamToolOutput,
)
from noeta.core.ports.store import Store

from .conftest import WorkerProcess, add_task, lapse_the_lease, workspace_of

WITHIN = 120


async def test_a_reader_sees_the_output_then_lost_when_the_worker_dies_mid_command(
    postgres_url: str, store: Store, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    command = "echo started; read word < gate; echo never shown"
    call = {"id": "call-1", "name": "Bash", "input": {"command": command}}
    await add_task(store, tmp_path, "k", {"tool_calls": [call]}, {"text": "after the cut"})
    gate = workspace_of(tmp_path, "k") / "gate"
    gate.parent.mkdir(parents=True)
    os.mkfifo(gate)
    items: list[StreamItem] = []
    try:
        async with AsyncClient(postgres_url, start_embedded=False) as client:
            reader = client.stream("k")
            first = asyncio.ensure_future(anext(reader))  # the reader follows from here
            port = store.capabilities.reply_streams
            assert port is not None
            await port.follow("k")  # as the feed does, before the worker streams
            dying = workers(postgres_url, "dying", lease=30)
            items.append(await asyncio.wait_for(first, WITHIN))
            while "started\n" not in "".join(getattr(item, "text", "") for item in items):
                items.append(await asyncio.wait_for(anext(reader), WITHIN))
            dying.signal(signal.SIGKILL)  # the command waits on the gate: mid-command
            assert await dying.exit_code() == -signal.SIGKILL
            await lapse_the_lease(postgres_url, "k")
            workers(postgres_url, "successor", lease=30)
            async with asyncio.timeout(WITHIN):
                async for item in reader:
                    items.append(item)
    finally:
        with contextlib.suppress(OSError):  # the orphaned command, if it still waits
            os.close(os.open(gate, os.O_WRONLY | os.O_NONBLOCK))
    log = await store.read_log("k")
    [cut] = [e for e in log if e.type == "ToolFinished"]
    assert isinstance(cut.data, dict) and cut.data["recovery"] == "unknown"
    [lost] = [item for item in items if isinstance(item, StreamLost)]
    assert (lost.call_id, lost.event_seq) == ("call-1", cut.seq)
    outputs = [item for item in items if isinstance(item, StreamToolOutput)]
    assert "".join(item.text for item in outputs) == "started\n"
    assert all(items.index(item) < items.index(lost) for item in outputs)
    assert not any(isinstance(item, StreamFinal) and item.call_id for item in items)
    finals = [item for item in items if isinstance(item, StreamFinal)]
    assert [final.text for final in finals] == ["after the cut"]
    assert items[-1] == StreamFinished("done")
