"""The text search's index as `noeta web` keeps it (ADR-0102): each search first brings it
a batch further; one found behind (a big store's first search) is built on in the
background, a batch at a time, while the pages say so. Nothing runs until a search."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from noeta.core.errors import StoreError
from noeta.core.ports.store_views import StoreViews

log = logging.getLogger("noeta.web")

BUILDING_NOTE = (
    "the search index is being built: until it is done, the tasks it does not hold yet "
    "are read as written, so a search is slower (never wrong)"
)


class SearchIndex:
    """One `noeta web` process's filling of the store's search index."""

    def __init__(self) -> None:
        self._build: asyncio.Task[None] | None = None

    @property
    def building(self) -> bool:
        return self._build is not None and not self._build.done()

    async def before_search(self, views: StoreViews) -> bool:
        """Bring the index a batch further; True when it holds every task but the last
        moments', else its build goes on in the background (started once)."""
        if self.building:
            return False
        if await views.index_search():
            return True
        self._build = asyncio.create_task(self._built(views), name="noeta-web-search-index")
        return False

    async def _built(self, views: StoreViews) -> None:
        try:
            while not await views.index_search():
                pass  # each step is a statement: the loop yields to the pages between
        except StoreError as error:  # the next search starts it again
            log.warning("noeta web: the search index stopped being built: %s", error)

    async def close(self) -> None:
        if self._build is not None:
            self._build.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._build
