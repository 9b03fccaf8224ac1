"""One attempt of a sync `@noeta.tool` function with a `time_limit`, in a process of its
own: past the limit it is stopped for real (SIGTERM, then SIGKILL after a grace) and
reaped before the next attempt starts, so attempts never overlap (issue 29 item 3).

The child imports the function's module by name, as the worker did, reads the input as
JSON on stdin and writes the return value (or the exception, pickled: it is the job's
own code, trusted as it is in the worker's threads) on stdout.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import pickle
import signal
import sys
from typing import Any

from noeta.core.ports.payload import JSONValue
from noeta.core.ports.tool import ToolContext

# How long a function past its limit has between SIGTERM and SIGKILL (its cleanup).
STOP_GRACE_SECONDS = 5.0


async def run_attempt(
    module: str, name: str, input: dict[str, JSONValue], ctx: ToolContext, limit: float
) -> Any:
    """The function's return value, its exception re-raised, or TimeoutError past
    `limit` seconds (once its process is gone)."""
    request = {"module": module, "name": name, "input": input, "ctx": _context(ctx)}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "noeta.plugins.function_child",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        start_new_session=True,  # its own group: what it started goes with it
    )
    try:
        out, _ = await asyncio.wait_for(
            process.communicate(json.dumps(request).encode()), timeout=limit
        )
    except BaseException:  # the limit, a cancel, a shutdown: the attempt ends here
        await _stop(process)
        raise
    return _outcome(out, process.returncode)


async def _stop(process: asyncio.subprocess.Process) -> None:
    """SIGTERM its group, SIGKILL after the grace; return once it is reaped."""
    for number in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, number)
        with contextlib.suppress(TimeoutError):
            await asyncio.shield(asyncio.wait_for(process.wait(), STOP_GRACE_SECONDS))
            return


def _outcome(out: bytes, returncode: int | None) -> Any:
    try:
        reply = json.loads(out)
    except ValueError:
        ended = f"the function's process ended without a result (exit {returncode})"
        raise RuntimeError(ended) from None
    if "error" in reply:
        raise pickle.loads(base64.b64decode(reply["error"]))
    return reply["value"]


def _context(ctx: ToolContext) -> dict[str, str | int]:
    return {
        "task_id": ctx.task_id,
        "call_id": ctx.call_id,
        "workspace": ctx.workspace,
        "subtask_id": ctx.subtask_id,
        "attempt": ctx.attempt,
    }
