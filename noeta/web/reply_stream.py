"""A running task's page shows the model's reply growing (issue 34, ADR-0105): its live
stream follows the task's reply stream as `tail --follow` does, through the client's
shared feeds (one follow, one LISTEN and one read per notice for every page of a task in
this process), and sends each item as a `reply` event that live.js places. The text is
scrubbed on the held-back window (ADR-0114, ADR-0115) and travels as JSON text: the page
sets it as text, never as HTML. A page nobody opens follows nothing."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator

from noeta.client.stream_items import (
    StreamFinal,
    StreamItem,
    StreamRestarted,
    StreamText,
    void_words,
)
from noeta.client.streaming import Feeds
from noeta.core.errors import NoetaError
from noeta.web.render import piece_scrubber, scrubbed
from noeta.web.site import Site

log = logging.getLogger("noeta.web")


class PageReply:
    """One page's view of a task's streamed replies: each item as the data of a `reply`
    event, or None for what the page does not show."""

    def __init__(self) -> None:
        self._scrub = piece_scrubber()

    def event(self, item: StreamItem) -> str | None:
        # The one place that dispatches on what came; a kind it does not know yet (tool
        # output, issue 34 item 2) is left out here, and live.js ignores unknown kinds.
        match item:
            case StreamText(text=text):
                shown = self._scrub.take(text)
                return _reply("text", text=shown) if shown else None
            case StreamRestarted():
                void = self._scrub.take("", release=True)  # the rest of the void text
                return _reply("restarted", text=void, words=f"↺ {void_words(item)}")
            case StreamFinal(event_seq=seq, event_type=kind, text=text):
                self._scrub.take("", release=True)  # the log's whole reply replaces it
                stored = scrubbed(text) if kind == "ModelReplied" else ""
                return _reply("final", seq=seq, text=stored)
            case _:
                return None


def _reply(kind: str, **fields: object) -> str:
    return json.dumps({"kind": kind, **fields}, ensure_ascii=False)


@contextlib.asynccontextmanager
async def following(
    site: Site, feeds: Feeds, task_id: str, wake: asyncio.Event
) -> AsyncIterator[list[str]]:
    """While open, the task's replies are read beside its log: each `reply` event's data
    is put on the list this yields and `wake` is set. A store that keeps no stream
    (sqlite) yields a list that stays empty: the log's rows bring each reply."""
    store = await site.primary_store()  # a standby keeps no stream and takes no follow
    port = store.capabilities.reply_streams
    shown: list[str] = []
    if port is None:
        yield shown
        return

    async def read() -> None:
        page = PageReply()
        try:
            async for item in feeds.stream(store, port, task_id, None):
                if (data := page.event(item)) is not None:
                    shown.append(data)
                    wake.set()
        except NoetaError as error:  # the log's rows still come: only the preview stops
            log.debug("task %s: its reply stream is not shown (%s)", task_id, error)

    reading = asyncio.ensure_future(read())
    try:
        yield shown
    finally:
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reading
