"""What a fresh worker does before its first claim: the imports its first run would make
on the event loop, made while nothing is claimed yet, so no lease waits on them."""

from __future__ import annotations

import asyncio
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
    log.info("warmed up in %.2f s", time.monotonic() - started)


def _import_what_runs_use() -> None:
    for name in RUN_IMPORTS:
        importlib.import_module(name)
