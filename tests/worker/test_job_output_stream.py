"""A background job's output streams to a reader as it is written (issue 34 item 2), in
the jobs' lane beside the task's calls, then a final naming the JobFinished that
recorded its result. A real worker (jobs run only under one); the job waits on a FIFO the
test opens only after it saw the job's first output."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from pathlib import Path

from noeta.client import AsyncClient
from noeta.client.stream_items import StreamFinal, StreamFinished, StreamItem, StreamToolOutput
from noeta.core.ports.reply_streams import Cursor
from noeta.core.ports.store import Store

from .conftest import WorkerProcess, add_task, workspace_of

WITHIN = 120


def job_output(items: list[StreamItem]) -> str:
    outputs = [i for i in items if isinstance(i, StreamToolOutput) and i.call_id == "job1"]
    return "".join(item.text for item in outputs)


async def test_a_background_jobs_output_streams_then_its_final(
    postgres_url: str, store: Store, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    command = "echo started; read word < gate; echo finished $word"
    job = {"id": "job1", "name": "Bash", "input": {"command": command, "run_in_background": True}}
    await add_task(
        store, tmp_path, "j", {"tool_calls": [job]}, {"text": "Waiting."}, {"text": "Read it."}
    )
    gate = workspace_of(tmp_path, "j") / "gate"
    gate.parent.mkdir(parents=True)
    os.mkfifo(gate)
    items: list[StreamItem] = []
    try:
        async with AsyncClient(postgres_url, start_embedded=False) as client:
            reader = client.stream("j")
            first = asyncio.ensure_future(anext(reader))  # the reader follows from here
            port = store.capabilities.reply_streams
            assert port is not None
            await port.follow("j")  # as the feed does, before the worker streams
            workers(postgres_url, "w", lease=30)
            items.append(await asyncio.wait_for(first, WITHIN))
            while "started\n" not in job_output(items):
                items.append(await asyncio.wait_for(anext(reader), WITHIN))
            await asyncio.to_thread(lambda: gate.write_bytes(b"go\n"))  # the job waits for it
            async with asyncio.timeout(WITHIN):
                async for item in reader:
                    items.append(item)
    finally:
        with contextlib.suppress(OSError):
            os.close(os.open(gate, os.O_WRONLY | os.O_NONBLOCK))
    [finished] = [e for e in await store.read_log("j") if e.type == "JobFinished"]
    assert isinstance(finished.data, dict)
    assert finished.data["output"] == "started\nfinished go\n[exit code 0]"
    [final] = [i for i in items if isinstance(i, StreamFinal) and i.call_id == "job1"]
    assert (final.event_seq, final.event_type) == (finished.seq, "JobFinished")
    assert final.text == finished.data["output"]
    # Before its end, the job's output as written (its last line, if read before the end).
    assert job_output(items) in ("started\n", "started\nfinished go\n")
    assert items.index(final) > max(
        n for n, i in enumerate(items) if isinstance(i, StreamToolOutput)
    )
    assert items[-1] == StreamFinished("done")
    # A reader resuming after the job's first output is not given it again.
    resume = next(i for i in items if isinstance(i, StreamToolOutput)).cursor
    assert resume.jobs != (0, 0) and Cursor.parse(str(resume)) == resume
