"""What a store can do beside `Store`, as it says itself (ADR-0084): typed ports, each
None where the store lacks it, and a wrapping store routes what it wraps to itself."""

from __future__ import annotations

import pytest

from noeta.backends.stores import open_store
from noeta.cli.status_line import FollowedStore, NoStatus
from noeta.observability.observed_store import ObservedStore


async def test_each_store_says_which_optional_ports_it_has(store_url: str) -> None:
    store = await open_store(store_url, migrate=True)
    try:
        offered = store.capabilities
        # Both stores keep these, as the store itself: no adapter in between.
        for port in ("bulk", "queue_settings", "views", "pruning", "model_limits"):
            assert getattr(offered, port) is store, port
        listens = not store_url.startswith("sqlite")
        # sqlite polls: no wake-ups, no one woken worker, no awaited finish (ADR-0087).
        for feature in ("holding", "wakeups", "finishes", "idle_workers", "await_finish"):
            assert (getattr(offered, feature) is not None) == listens, feature
    finally:
        await store.close()


@pytest.mark.parametrize("wrap", [ObservedStore, lambda s: FollowedStore(s, NoStatus())])
async def test_a_wrapping_store_keeps_the_model_limited_appends_its_own(
    tmp_path: object, wrap: object
) -> None:
    """The observed store times them, the status line shows them: the limits' port of a
    wrapper is the wrapper, the rest the inner store's."""
    inner = await open_store(f"sqlite:///{tmp_path}/noeta.db", migrate=True)
    try:
        wrapper = wrap(inner)  # type: ignore[operator]
        offered = wrapper.capabilities
        assert offered.model_limits is wrapper
        assert offered.pruning is inner.capabilities.pruning
    finally:
        await inner.close()


async def test_a_store_says_it_once(store_url: str, tmp_path: object) -> None:
    """A run asks for the capabilities on every append and model call: the answer is
    made once per store (and per wrapper), not anew each time (issue 28)."""
    store = await open_store(store_url, migrate=True)
    try:
        assert store.capabilities is store.capabilities
        observed = ObservedStore(store)
        assert observed.capabilities is observed.capabilities
    finally:
        await store.close()
