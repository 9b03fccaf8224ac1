"""`Client` is `AsyncClient` without `await`: the same public methods, each with the same
parameters, and what the awaited call returns (a log's events: an iterator instead of
an async one). A method added to one and not the other fails here."""

from __future__ import annotations

import inspect

from noeta.client import AsyncClient, Client

# `store()` hands out the async Store itself: nothing a caller without a loop can use.
ASYNC_ONLY = {"store"}
# The context manager is spelt with or without `a`.
TWINS = {"__aenter__": "__enter__", "__aexit__": "__exit__"}
ITERATORS = {
    "AsyncGenerator[TailedEvent, None]": "Iterator[TailedEvent]",
    "AsyncGenerator[StreamItem, None]": "Iterator[StreamItem]",
}


def public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def test_the_sync_client_has_every_public_method_of_the_async_one() -> None:
    assert public(Client) == public(AsyncClient) - ASYNC_ONLY


def test_each_method_takes_the_same_parameters_and_returns_what_the_await_would() -> None:
    names = [*sorted(public(AsyncClient) - ASYNC_ONLY - {"waiting"}), "__init__", "__aexit__"]
    for name in names:
        awaited = inspect.signature(getattr(AsyncClient, name))
        blocking = inspect.signature(getattr(Client, TWINS.get(name, name)))
        assert list(blocking.parameters.values()) == list(awaited.parameters.values()), name
        returns = awaited.return_annotation
        assert blocking.return_annotation == ITERATORS.get(returns, returns), name


def test_waiting_is_a_property_on_both() -> None:
    assert isinstance(AsyncClient.waiting, property) and isinstance(Client.waiting, property)


def test_no_sync_method_is_a_coroutine_function() -> None:
    for name in public(Client) - {"waiting"}:
        method = getattr(Client, name)
        assert not inspect.iscoroutinefunction(method), name
        assert not inspect.isasyncgenfunction(method), name
        assert method.__doc__ == getattr(AsyncClient, name).__doc__, name
