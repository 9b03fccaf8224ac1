"""`noeta tail --follow`'s live text: a model reply printed as it streams (ADR-0105), and
a command's output as it is written (ADR-0114), between the log's steps, with a line when
the text so far is void (restarted), when the reply is in the log (final) and when a
command's worker died under it (lost)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from typing import TextIO

from noeta.cli.status_line import NoStatus
from noeta.cli.text import STEP_INDENT, piece_scrubber, scrubbed
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

# A command's output is marked apart from a reply's text: `┊` its stdout, `┊!` stderr.
OUTPUT_PREFIXES = {"stdout": "┊ ", "stderr": "┊! ", "truncated": "┊ "}
# Control characters a command printed are shown, never played on the terminal (an
# escape sequence could rewrite what the user sees); a \r (a progress bar) ends a line.
_CONTROL = {code: f"\\x{code:02x}" for code in (*range(32), 127) if code not in (9, 10)}


class ReplyPrinter:
    """Prints streamed text on `out`; the log's steps break its line first (`break_line`)
    and the status line is held while a line of text is open under it."""

    def __init__(self, line: NoStatus, out: TextIO | None = None) -> None:
        self.line = line
        self.out = out or sys.stdout
        self.shown = ""  # the reply's text taken so far (some held back: `_scrub`)
        self.mid_line = False
        self.prefix = ""  # the prefix of the line open now
        # A reply's text is scrubbed on the held-back window (ADR-0114, ADR-0115), as the
        # worker scrubs a command's output: a key split across two pieces is caught.
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
                self._write(self._scrub.take(text))
                self.shown += text
            case StreamToolOutput(stream=stream, text=text):
                self._write(visible(text), OUTPUT_PREFIXES[stream])
            case StreamLost():
                self.break_line()
                self._say(f"✗ {lost_words(item)}")
            case StreamRestarted():
                self._write(self._scrub.take("", release=True))  # the void text, whole
                self.break_line()
                self._say(f"↺ {void_words(item)}")
                self.shown = ""
            case StreamFinal(event_type="ModelReplied", text=text):
                if text.startswith(self.shown):  # what the log has that was not shown
                    self._write(self._scrub.take(text[len(self.shown) :], release=True))
                else:  # text was lost on the way: the whole reply, from the log
                    self._scrub.take("", release=True)
                    self.break_line()
                    self._write(text)
                self.break_line()
                self.shown = ""
            case StreamFinal():  # a tool's result, or a failed call: its step says it
                self._write(self._scrub.take("", release=True))
                self.break_line()
                self.shown = ""

    def _open(self, prefix: str) -> None:
        self.line.hold(True)
        self.out.write(STEP_INDENT + prefix)
        self.mid_line = True
        self.prefix = prefix

    def _write(self, text: str, prefix: str = "▸ ") -> None:
        if not text:
            return
        if self.mid_line and prefix != self.prefix:  # stdout after stderr: a line of its own
            self.break_line()
        if not self.mid_line:
            self._open(prefix)
        # A reply's text came through the window (`take`); a command's output was scrubbed
        # on one by its worker (ADR-0114). Scrubbing again changes neither.
        body, ended = scrubbed(text), text.endswith("\n")
        indent = STEP_INDENT + (prefix if prefix != "▸ " else "  ")
        self.out.write(body.removesuffix("\n").replace("\n", "\n" + indent))
        if ended and prefix != "▸ ":
            self.out.write("\n")
            self.mid_line = False
            self.line.hold(False)
        elif ended:
            self.out.write("\n" + indent)
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


def visible(text: str) -> str:
    """A command's output as a terminal may print it: control characters shown escaped,
    a carriage return (alone or before a newline) a line end."""
    return text.replace("\r\n", "\n").replace("\r", "\n").translate(_CONTROL)
