"""One attempt of a sync `@noeta.tool` function with a `time_limit`, in a process of its
own: past the limit it is stopped for real (SIGTERM, then SIGKILL after a grace) and
reaped before the next attempt starts, so attempts never overlap (issue 29 item 3); a
worker that dies (SIGKILL) takes it along (PR_SET_PDEATHSIG), so recovery's attempt
does not overlap it either.

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
# How long the process may take to start (the interpreter, the function's module's
# imports) before the call: the limits count from the call.
STARTUP_SECONDS = 120.0
# The line the process writes on stdout once the function is imported, just before the call.
READY = b"ready\n"


async def run_attempt(
    module: str,
    name: str,
    input: dict[str, JSONValue],
    ctx: ToolContext,
    limit: float | None,
    soft_limit: float | None = None,
) -> Any:
    """The function's return value, its exception re-raised (SoftTimeLimitExceeded past
    `soft_limit`, unless it caught it), or TimeoutError past `limit` seconds (once its
    process is gone)."""
    request = {
        "module": module,
        "name": name,
        "input": input,
        "ctx": _context(ctx),
        "soft_limit": soft_limit,
        "parent": os.getpid(),  # the child dies with this process (PR_SET_PDEATHSIG)
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "noeta.plugins.function_child",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        start_new_session=True,  # its own group: what it started goes with it
    )
    try:
        out = await _reply(process, json.dumps(request).encode(), limit)
    except BaseException:  # the limit, a cancel, a shutdown: the attempt ends here
        await _stop(process)
        raise
    return _outcome(out, process.returncode)


async def _reply(process: asyncio.subprocess.Process, request: bytes, limit: float | None) -> bytes:
    """What the process wrote after READY, within `limit` seconds of READY: the limits
    count from the call, as the soft one does in the process; its start (an interpreter,
    the job's imports: seconds under load) has STARTUP_SECONDS of its own."""
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(request)
    await process.stdin.drain()
    process.stdin.close()
    try:
        first = await asyncio.wait_for(process.stdout.readexactly(len(READY)), STARTUP_SECONDS)
    except asyncio.IncompleteReadError as ended:
        first = ended.partial  # it ended before the call: an import failed, say
    except TimeoutError:
        raise RuntimeError(
            f"the function's process did not start within {STARTUP_SECONDS:g}s"
        ) from None
    if first != READY:
        return first + await _rest(process)
    return await asyncio.wait_for(_rest(process), limit)


async def _rest(process: asyncio.subprocess.Process) -> bytes:
    assert process.stdout is not None
    out = await process.stdout.read()
    await process.wait()
    return out


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
