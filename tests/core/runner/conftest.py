"""The runner's tests: a fresh store of each kind (`store_url`), opened and migrated."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from noeta.backends.stores import open_store
from noeta.core.ports.store import Store


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    opened = await open_store(store_url, migrate=True)
    yield opened
    await opened.close()
