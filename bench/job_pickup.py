"""Where an idle job pickup's time goes, step by step, for bench/jobs.py.

In one process (so the clocks compare): the real store and runner (the bench's job
plugin), LISTEN as a worker does; a job is created, and each step's return is stamped:
the create's commit, the NOTIFY heard, the claim's commit, the log loaded, the runner
ready to append ToolStarted, and that append's commit. No worker loop: what that adds is
the noeta row of the pickup table minus this one.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from typing import Any

from noeta.backends.models.registry import ProviderRegistry
from noeta.backends.stores.postgres import PostgresStore
from noeta.client.job_tasks import job_task
from noeta.config import load_config
from noeta.core.ports.tool import Tool
from noeta.plugins.toolbox import Toolbox

STEPS = ("created", "notified", "claimed", "loaded", "appending", "started")
QUEUE = "breakdown"


def stamping(stamps: dict[str, float], step: str, call: Callable[..., Any]) -> Any:
    """`call`, stamping the moment its first call returns (and, for the append, is made)."""

    async def stamped(*args: Any, **kwargs: Any) -> Any:
        if step == "started":
            stamps.setdefault("appending", time.perf_counter())
        result = await call(*args, **kwargs)
        stamps.setdefault(step, time.perf_counter())
        return result

    return stamped


async def pickup_steps(url: str, config: str, job: Tool, count: int, pause: float) -> list[float]:
    """The median time of each step after the one before, in seconds (STEPS order)."""
    box = await Toolbox.open(load_config(config), runs_tools=True)
    store = await PostgresStore.open(url, application_name="bench-breakdown")
    maker = await PostgresStore.open(url, application_name="bench-submit")
    stamps: dict[str, float] = {}
    store.load = stamping(stamps, "loaded", store.load)  # type: ignore[method-assign]
    store.append = stamping(stamps, "started", store.append)  # type: ignore[method-assign]
    runner = box.runner(store, ProviderRegistry())
    ran = asyncio.Event()

    async def pick_up() -> None:
        async for queue in store.wakeups():
            if queue == QUEUE:
                stamps["notified"] = time.perf_counter()
                claim = await store.claim("breakdown", [QUEUE], 30.0)
                if claim is not None:
                    stamps["claimed"] = time.perf_counter()
                    await runner.run(claim)
                    ran.set()

    picking = asyncio.create_task(pick_up())
    rows: list[dict[str, float]] = []
    try:
        await asyncio.sleep(pause * 10)  # LISTENing
        for n in range(count):
            stamps.clear()
            ran.clear()
            begun = time.perf_counter()
            await maker.create_task(job_task(f"breakdown-{n}", job, {}, QUEUE, None))  # type: ignore[arg-type]
            stamps["created"] = time.perf_counter()
            await asyncio.wait_for(ran.wait(), 30)
            rows.append({step: stamps[step] - begun for step in STEPS})
            await asyncio.sleep(pause)  # idle again before the next
    finally:
        picking.cancel()
        await asyncio.gather(picking, return_exceptions=True)
        await store.close()
        await maker.close()
        await box.close()
    medians = [statistics.median(row[step] for row in rows) for step in STEPS]
    return [b - a for a, b in zip([0.0, *medians], medians, strict=False)]
