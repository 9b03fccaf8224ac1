"""A running task's page shows the model's reply growing and a running command's output
as it is written (issue 34, ADR-0105, ADR-0114): its live stream follows the task's
stream as `tail --follow` does, through the client's shared feeds (one follow, one
LISTEN and one read per notice for every page of a task in this process), and sends each
item as a `reply` event that live.js places. The text is scrubbed on the held-back window
(ADR-0114, ADR-0115) and travels as JSON text: the page sets it as text, never as HTML.
A page nobody opens follows nothing."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator

from noeta.client.stream_items import (
    StreamFinal,
    StreamItem,
    StreamLost,
    StreamRestarted,
    StreamText,
    StreamToolOutput,
    lost_words,
    void_words,
)
from noeta.client.streaming import Feeds
from noeta.core.errors import NoetaError
from noeta.redaction import ScrubWindow
from noeta.web.render import piece_scrubber, scrubbed
from noeta.web.site import Site

log = logging.getLogger("noeta.web")
CLOSE_SECONDS = 1.0  # how long a page's stream waits for its reply reader to stop


class PageReply:
    """One page's view of a task's streams: each item as the data of a `reply` event, or
    None for what the page does not show. A model's reply grows as text; a running
    command's output (Bash's, a background job's: ADR-0114) as its stdout and stderr,
    under the call it belongs to, until the log's row of its result replaces it."""

    def __init__(self) -> None:
        self._scrub = piece_scrubber()
        # The worker scrubbed the output with its secrets; the page's own (its store's
        # password) are held back per call and pipe, as for the reply.
        self._outputs: dict[tuple[str, str], ScrubWindow] = {}

    def event(self, item: StreamItem) -> str | None:
        # The one place that dispatches on what came; live.js ignores a kind it does
        # not know.
        match item:
            case StreamText(text=text):
                shown = self._scrub.take(text)
                return _reply("text", text=shown) if shown else None
            case StreamRestarted():
                void = self._scrub.take("", release=True)  # the rest of the void text
                return _reply("restarted", text=void, words=f"↺ {void_words(item)}")
            case StreamToolOutput(call_id=call, stream=pipe, text=text):
                if pipe == "truncated":
                    return _reply("output", call=call, pipe=pipe, text=scrubbed(text))
                window = self._outputs.setdefault((call, pipe), piece_scrubber())
                shown = window.take(text)
                return _reply("output", call=call, pipe=pipe, text=shown) if shown else None
            case StreamFinal(event_seq=seq, call_id=call) if call:
                return self._output_end(call, "output-final", seq)
            case StreamLost(call_id=call, event_seq=seq):
                return self._output_end(call, "output-lost", seq, words=f"✗ {lost_words(item)}")
            case StreamFinal(event_seq=seq, event_type=kind, text=text):
                self._scrub.take("", release=True)  # the log's whole reply replaces it
                stored = scrubbed(text) if kind == "ModelReplied" else ""
                return _reply("final", seq=seq, text=stored)
            case _:
                return None

    def _output_end(self, call: str, kind: str, seq: int, **more: str) -> str:
        """The call's output ended: what its windows held, and the log's row (`seq`) that
        replaces it on the page once it arrives."""
        held = {
            pipe: window.take("", release=True)
            for (of, pipe), window in list(self._outputs.items())
            if of == call
        }
        for pipe in held:
            del self._outputs[(call, pipe)]
        return _reply(kind, call=call, seq=seq, held=held, **more)


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
        # Bounded: the feed's last reader stops it, and a statement cut mid-flight on a
        # loaded machine must not hold the page's stream (or the server's stop) open;
        # one still ending is cancelled again when the process closes its feeds.
        await asyncio.wait([reading], timeout=CLOSE_SECONDS)
