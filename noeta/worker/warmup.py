"""What a fresh worker does before its first claim: the imports its first run would make
on the event loop, made while nothing is claimed yet, so no lease waits on them."""

from __future__ import annotations

import asyncio
import gc
import importlib
import logging
import time

log = logging.getLogger("noeta.worker")

# What a run imports at its first use; tests/worker/test_fresh_worker.py fails if a run
# imports anything after the worker's first claim, so a new lazy import is listed here.
RUN_IMPORTS = (
    "encodings.utf_8_sig",  # a YAML file's decoding (noeta/yamlfile.py)
    "jsonschema",  # a tool input's first check (noeta/core/rules/tool_input.py)
    "noeta.backends.models.anthropic",  # the providers, and httpx
    "noeta.backends.models.openai",
    "noeta.backends.models.scripted",  # and yaml
    "noeta.plugins.core.egress_proxy",  # a Bash command's network proxy
    "noeta.plugins.core.web_access",
)


async def warm_up() -> None:
    """Import what a task's first run imports at its first use (kept out of `noeta
    --help` and `submit` by ADR-0056), in a thread, which also starts the default executor
    the runs' file and sandbox work goes through. Under CPU load these cost about a second
    (issue 26): paid after a claim, its first renewal waited for them."""
    started = time.monotonic()
    await asyncio.to_thread(_import_what_runs_use)
    collect_less()
    log.info("warmed up in %.2f s", time.monotonic() - started)


# The cyclic collector's first threshold in a worker (CPython's default is 700). A run
# makes many short-lived containers (events, states, requests) that reference counting
# frees; at 700 the collector ran about every sixth of a one-shot task, a tenth of the
# worker's CPU (ADR-0119). Cycles are still collected, at most this many objects later.
YOUNG_OBJECTS = 10_000


def collect_less() -> None:
    """What the worker imported and built to start is kept for its life: frozen, the
    collector no longer walks it at each full collection; and it collects young objects
    less often (`YOUNG_OBJECTS`)."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_OBJECTS, middle, old)


def _import_what_runs_use() -> None:
    for name in RUN_IMPORTS:
        importlib.import_module(name)
