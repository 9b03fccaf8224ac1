"""A command's output as Bash keeps it: stdout and stderr read from their own pipes,
decoded safely, kept head and tail within a bound, and the head handed as it comes to
whoever streams it (ADR-0114)."""

from __future__ import annotations

import asyncio
import codecs
from typing import IO

from noeta.core.ports.tool import OutputHook, OutputName


class OutputCapture:
    """Decoded output, keeping at most `cap` characters of head and of tail in memory.

    Bytes that are not UTF-8 show as `\\xff` escapes and NUL as `\\x00`: readable for the
    model, and storable by any backend. Each pipe has its own decoder (`Decoder`), so a
    character split across two reads of one pipe survives whatever the other wrote.
    """

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.decoder = Decoder()  # for `add` of bytes (one pipe, or a test)
        self.head: list[str] = []
        self.head_size = 0
        self.tail = ""
        self.total = 0

    def add(self, data: bytes, final: bool = False) -> None:
        self.add_text(self.decoder.decode(data, final))

    def add_text(self, chunk: str) -> str:
        """Keep `chunk`; returns the part of it that went into the head (the start of the
        output, which the stored result keeps and a stream shows)."""
        self.total += len(chunk)
        room = self.cap - self.head_size
        kept = ""
        if room > 0:
            kept = chunk[:room]
            self.head.append(kept)
            self.head_size += len(kept)
            chunk = chunk[room:]
        if chunk:
            self.tail = (self.tail + chunk)[-self.cap :]
        return kept

    def text(self) -> str:
        self.add(b"", final=True)
        head = "".join(self.head)
        if self.total <= self.cap:
            return head + self.tail
        # The start says what ran, the end how it ended: keep half of each.
        keep_head = self.cap // 2
        keep_tail = self.cap - keep_head
        whole_tail = (head + self.tail)[-keep_tail:]
        cut = self.total - keep_head - keep_tail
        return (
            f"{head[:keep_head]}\n[… {cut:,} of {self.total:,} characters cut from the "
            f"middle …]\n{whole_tail}"
        )


class Decoder:
    """One pipe's bytes as text: UTF-8, a character split across reads joined, bytes that
    are not UTF-8 as `\\xff` escapes and NUL as `\\x00` (never a crash, never a lone
    surrogate); control characters (\\r, ANSI escapes) are kept: they are data."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="backslashreplace")

    def decode(self, data: bytes, final: bool = False) -> str:
        return self._decoder.decode(data, final).replace("\x00", "\\x00")


class OutputProtocol(asyncio.Protocol):
    """One pipe (`name`: stdout or stderr) into the shared capture; the part that lands in
    the capture's head goes to `hook` too, and once the head is full, one "truncated"."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        capture: OutputCapture,
        name: OutputName,
        hook: OutputHook | None = None,
    ) -> None:
        self.capture = capture
        self.name = name
        self.hook = hook
        self.decoder = Decoder()
        self.closed: asyncio.Future[None] = loop.create_future()

    def data_received(self, data: bytes) -> None:
        self._take(self.decoder.decode(data))

    def connection_lost(self, exc: Exception | None) -> None:
        self._take(self.decoder.decode(b"", final=True))
        if not self.closed.done():
            self.closed.set_result(None)

    def _take(self, text: str) -> None:
        if not text:
            return
        capture = self.capture
        overflowed = capture.total > capture.head_size  # told "truncated" already
        kept = capture.add_text(text)
        if self.hook is None:
            return
        if kept:
            self.hook(self.name, kept)
        if not overflowed and capture.total > capture.head_size:
            self.hook("truncated", "")


async def read_pipes(
    stdout: IO[bytes],
    stderr: IO[bytes],
    capture: OutputCapture,
    hook: OutputHook | None,
    readers: list[asyncio.BaseTransport],
    closed: list[asyncio.Future[None]],
) -> None:
    """Read both pipes into `capture` on the loop; each transport goes to `readers` (to
    close) and its end to `closed` (to wait for) as soon as it is made."""
    loop = asyncio.get_running_loop()
    pipes: tuple[tuple[OutputName, IO[bytes]], ...] = (("stdout", stdout), ("stderr", stderr))
    for name, pipe in pipes:
        protocol = OutputProtocol(loop, capture, name, hook)
        reader, _ = await loop.connect_read_pipe(lambda: protocol, pipe)  # noqa: B023
        readers.append(reader)
        closed.append(protocol.closed)
