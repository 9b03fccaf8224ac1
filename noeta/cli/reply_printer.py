"""`noeta tail --follow`'s live text: a model reply printed as it streams (ADR-0105),
between the log's steps, with a line when the text so far is void (restarted) and when
the reply is in the log (final)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from typing import TextIO

from noeta.cli.status_line import NoStatus
from noeta.cli.text import STEP_INDENT, piece_scrubber
from noeta.client.stream_items import (
    StreamFinal,
    StreamItem,
    StreamRestarted,
    StreamText,
    void_words,
)


class ReplyPrinter:
    """Prints streamed text on `out`; the log's steps break its line first (`break_line`)
    and the status line is held while a line of text is open under it."""

    def __init__(self, line: NoStatus, out: TextIO | None = None) -> None:
        self.line = line
        self.out = out or sys.stdout
        self.shown = ""  # the reply's text taken so far (some held back: `_scrub`)
        self.mid_line = False
        # Scrubbed on a carried-over window: a key split across two pieces is caught.
        self._scrub = piece_scrubber()

    def break_line(self) -> None:
        """End an open line of text: a step's lines print next."""
        if self.mid_line:
            self.out.write("\n")
            self.out.flush()
            self.mid_line = False
            self.line.hold(False)

    def take(self, item: StreamItem) -> None:
        match item:
            case StreamText(text=text):
                self._write(self._scrub.feed(text))
                self.shown += text
            case StreamRestarted():
                self._write(self._scrub.end())  # the void text, whole
                self.break_line()
                self._say(f"↺ {void_words(item)}")
                self.shown = ""
            case StreamFinal(event_type="ModelReplied", text=text):
                if text.startswith(self.shown):  # what the log has that was not shown
                    self._write(self._scrub.feed(text[len(self.shown) :]) + self._scrub.end())
                else:  # text was lost on the way: the whole reply, from the log
                    self._scrub.end()
                    self.break_line()
                    self._write(self._scrub.feed(text) + self._scrub.end())
                self.break_line()
                self.shown = ""
            case StreamFinal():  # the call failed: its step says why
                self._write(self._scrub.end())
                self.break_line()
                self.shown = ""

    def _open(self, prefix: str) -> None:
        self.line.hold(True)
        self.out.write(prefix)
        self.mid_line = True

    def _write(self, text: str) -> None:
        if not text:
            return
        if not self.mid_line:
            self._open(f"{STEP_INDENT}▸ ")
        self.out.write(text.replace("\n", "\n" + STEP_INDENT + "  "))
        self.out.flush()

    def _say(self, words: str) -> None:
        self.line.hold(True)
        self.out.write(f"{STEP_INDENT}{words}\n")
        self.out.flush()
        self.line.hold(False)


async def print_stream(items: AsyncIterator[StreamItem], printer: ReplyPrinter) -> None:
    """Print every item until the stream ends (the task finished)."""
    async for item in items:
        printer.take(item)
    with contextlib.suppress(ValueError):  # stdout closed under us
        printer.break_line()
