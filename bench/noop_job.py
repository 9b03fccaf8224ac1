"""The no-op jobs bench/jobs.py drains (a module of decorated functions is a plugin): a
sync one (run in a thread, as any sync function is) and an async one, as the peers'
no-ops are (bench/peer_adapters.py: PgQueuer's and Procrastinate's are `async def`)."""

from __future__ import annotations

import noeta


@noeta.tool(retry_safe=True)
def noop() -> None:
    """Does nothing: what is measured is the queue and the fenced log around it."""


@noeta.tool(retry_safe=True)
async def noop_async() -> None:
    """Does nothing, on the event loop: no thread hop, as the peers' async no-ops."""


FUNCTIONS = {"noop": noop, "noop_async": noop_async}
