"""The no-op jobs bench/jobs.py drains (a module of decorated functions is a plugin): a
sync one (run in a thread, as any sync function is) and an async one, as the peers'
no-ops are (bench/peer_adapters.py: PgQueuer's and Procrastinate's are `async def`)."""

from __future__ import annotations

import os
import time

import noeta

# bench/peers.py's idle pickup of noeta-job names a file here: the async no-op appends its
# start to it ("0 t_start"), as the peers' no-ops record theirs (bench/peer_adapters.py),
# so that noeta's job is timed to its function's start like theirs. Unset in drains.
_STARTS = os.environ.get("NOETA_BENCH_STARTS")
_STARTS_FD = os.open(_STARTS, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if _STARTS else None


@noeta.tool(retry_safe=True)
def noop() -> None:
    """Does nothing: what is measured is the queue and the fenced log around it."""


@noeta.tool(retry_safe=True)
async def noop_async() -> None:
    """Does nothing, on the event loop: no thread hop, as the peers' async no-ops."""
    if _STARTS_FD is not None:
        os.write(_STARTS_FD, f"0 {time.time()!r}\n".encode())


FUNCTIONS = {"noop": noop, "noop_async": noop_async}
