"""The loops a worker may run on, for the tests of what it runs in-process (its tools'
subprocesses, sandboxes, pipes, MCP servers): each such test runs on both (ADR-0151)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import pytest
import uvloop

BOTH: Mapping[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


def on_both_loops(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    """pytest-asyncio's `pytest_asyncio_loop_factories` for a conftest: every async test
    of its folder runs once on asyncio's loop and once on uvloop's."""
    return BOTH
