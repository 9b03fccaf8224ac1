"""The event loop a long-running process runs on: uvloop where it is installed (Linux and
macOS), asyncio's own when NOETA_EVENT_LOOP=asyncio or where it is not (ADR-0151)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from noeta.core.errors import ConfigError

ENV = "NOETA_EVENT_LOOP"
CHOICES = ("uvloop", "asyncio")

T = TypeVar("T")
LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def run(main: Coroutine[Any, Any, T], factory: LoopFactory | None) -> T:
    """`asyncio.run(main)` on the loop `factory` makes (None: asyncio's)."""
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


def loop_factory() -> LoopFactory | None:
    """uvloop's `new_event_loop` unless NOETA_EVENT_LOOP says asyncio (None: asyncio's).
    A bad value, or uvloop asked for where it is not installed, is a ConfigError: asked
    before the process starts anything, so it is one line and nothing else happens."""
    named = os.environ.get(ENV, "").strip().lower()
    if named not in ("", *CHOICES):
        raise ConfigError(f"{ENV} must be one of {', '.join(CHOICES)}, not {named!r}")
    if named == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if named == "uvloop":
            raise ConfigError(f"{ENV}=uvloop, but uvloop is not installed here") from None
        return None  # Windows, or an install without it: asyncio's loop, as before
    return uvloop.new_event_loop


def running_name() -> str:
    """The running loop's package, "uvloop" or "asyncio": what runs, not what was asked."""
    return type(asyncio.get_running_loop()).__module__.partition(".")[0]
