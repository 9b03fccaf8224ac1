"""A Celery-shaped call site: `fn.delay(...)` and `fn.apply_async(kwargs, countdown=…)`
on a `@noeta.tool` function enqueue it through this process's default `Client` (the
store of `NOETA_STORE`, the config of `NOETA_CONFIG`; `use_client` names another)."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from noeta.client.handles import TaskHandle
from noeta.client.sync_client import Client
from noeta.core.ports.store import DEFAULT_PRIORITY, DEFAULT_QUEUE
from noeta.plugins.function_tools import FunctionTool, install_call_site


class _Default:
    """The process's default Client, made at most once."""

    client: Client | None = None
    making = threading.Lock()


def use_client(client: Client | None) -> None:
    """Make `client` the one `delay` and `apply_async` enqueue through (None: the one
    made from the environment at the next call)."""
    with _Default.making:
        _Default.client = client


def default_client() -> Client:
    with _Default.making:
        if _Default.client is None:
            _Default.client = Client()  # NOETA_STORE, NOETA_CONFIG; closed at exit
        return _Default.client


def call_input(
    tool: FunctionTool, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """The job's input from a call's arguments, bound to the function's signature as a
    call would be: an argument it lacks, or a missing one, is a TypeError here, before
    anything is written."""
    signature = inspect.signature(tool.function)
    without_ctx = signature.replace(
        parameters=[p for p in signature.parameters.values() if p.name != "ctx"]
    )
    try:
        bound = without_ctx.bind(*args, **kwargs)
    except TypeError as error:
        raise TypeError(f"{tool.name}(): {error}") from None
    return dict(bound.arguments)


def apply_async(
    tool: FunctionTool,
    args: tuple[Any, ...] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    countdown: float | None = None,
    eta: datetime | None = None,
    queue: str = DEFAULT_QUEUE,
    key: str | None = None,
    priority: int = DEFAULT_PRIORITY,
    unique_key: str | None = None,
    unique_for: float | None = None,
    debounce: float | None = None,
) -> TaskHandle:
    """Enqueue one call of `tool` (Celery's `apply_async`): `countdown` seconds from now,
    or at `eta`, is when it may start; `unique_key` with `unique_for` or `debounce` as for
    `enqueue` (ADR-0093)."""
    input = call_input(tool, args, kwargs or {})
    return default_client().enqueue(
        tool.name,
        input,
        queue=queue,
        eta=eta,
        countdown=countdown,
        key=key,
        priority=priority,
        unique_key=unique_key,
        unique_for=unique_for,
        debounce=debounce,
    )


install_call_site(apply_async)
