"""A TCP proxy between noeta and PostgreSQL that injects network faults for real.

It runs its own event loop in a thread, so it keeps working while the code under test
blocks. Faults: `blackhole()` (bytes stop flowing both ways, sockets stay open, as in a
partition), `cut_next_reply()` (the next bytes the server sends are dropped and the
client's connection is reset: a write the server committed whose reply never arrives),
`drop_all()` (every connection is reset at once), `refuse()` (the same, and each new
connection too, until `accept()`), `forget(ends_after=...)` (the
connections open now go silent for good, their closes unseen, while new ones pass: a
firewall, a NAT or a failover that forgot them; each end is reset later, as its own
keepalives would find it), and, given `cut_functions` (the SQL
functions a test means, by name), `cut_statement(before=...)`: the next statement that
calls one of them is cut off before it reaches the server, or after (its reply is lost:
the outcome is unknown).

It listens on 127.0.0.1, or on a socket the caller bound (`listening`): one made in
another network namespace, for a path whose packets a test drops in the kernel.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Coroutine, Iterable
from typing import Any

from noeta.testing.pg_frames import FrontendReader, calls_to


class FaultProxy:
    def __init__(
        self,
        target_host: str,
        target_port: int,
        cut_functions: Iterable[str] = (),
        *,
        listening: socket.socket | None = None,
    ) -> None:
        self.target = (target_host, target_port)
        self._listening = listening
        self.port = 0
        self.replies_cut = 0
        self.statements_cut = {"before": 0, "after": 0}
        self._cut_functions = tuple(cut_functions)
        if self._cut_functions:
            calls_to(self._cut_functions)  # a bad name fails here, not in the proxy's thread
        self._statement_cut: str | None = None  # "before" or "after": armed, once
        self._readers: dict[asyncio.StreamWriter, FrontendReader] = {}
        self._cut_reply_of: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._flowing = threading.Event()
        self._flowing.set()
        self._refusing = False  # `refuse()`: every new connection reset at once
        self._cut_next_reply = False
        self._writers: set[asyncio.StreamWriter] = set()
        # Each client's connection to the server, and those a `forget()` made silent.
        self._pairs: dict[asyncio.StreamWriter, asyncio.StreamWriter] = {}
        self._forgotten: set[asyncio.StreamWriter] = set()

    def start(self) -> int:
        self._thread.start()
        self._call(self._listen())
        return self.port

    def stop(self) -> None:
        """Reset every connection and stop listening (new connections are refused); once."""
        if self._loop.is_closed():
            return
        self._call(self._shut_down())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    def blackhole(self) -> None:
        self._flowing.clear()

    def heal(self) -> None:
        self._flowing.set()

    def cut_next_reply(self) -> None:
        self._cut_next_reply = True

    def drop_all(self) -> None:
        self._call(self._reset_all())

    def refuse(self) -> None:
        """Reset every connection, and each new one as it comes, until `accept()`: a
        server that went away and whose logins fail (a restart, as a pooler sees it)."""
        self._refusing = True
        self.drop_all()

    def accept(self) -> None:
        self._refusing = False

    def forget(self, *, ends_after: float) -> int:
        """The connections open now, forgotten: what either side sends them vanishes, a
        side's close included (the other is not told), and new connections pass. After
        `ends_after` seconds both ends are reset, as each side's keepalive probes going
        unanswered would end them (ADR-0129, ADR-0154). How many were forgotten."""
        forgotten: list[int] = []

        async def forget_now() -> None:  # on the proxy's loop, which changes the pairs
            pairs = dict(self._pairs)
            self._forgotten |= set(pairs)
            self._loop.call_later(ends_after, self._end, pairs)
            forgotten.append(len(pairs))

        self._call(forget_now())
        return forgotten[0]

    def cut_statement(self, *, before: bool) -> None:
        """Cut the next statement calling one of the `cut_functions`: before the server
        sees it, or after it was sent (its reply is dropped, the connection reset)."""
        assert self._cut_functions, "a FaultProxy built without cut_functions"
        self._statement_cut = "before" if before else "after"

    def statement_cut_pending(self) -> bool:
        return self._statement_cut is not None

    def disarm(self) -> None:
        """Forget a statement cut that has not happened yet."""
        self._statement_cut = None

    # --- internals -------------------------------------------------------------------

    def _call(self, coroutine: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=10)

    async def _listen(self) -> None:
        if self._listening is None:
            self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        else:
            self._server = await asyncio.start_server(self._accept, sock=self._listening)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._refusing:
            _reset(writer)
            return
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _reset(writer)
            return
        self._writers |= {writer, upstream_writer}
        self._pairs[writer] = upstream_writer
        if self._cut_functions:
            self._readers[writer] = FrontendReader(self._cut_functions)
        pumps = (
            self._pump(reader, upstream_writer, client=writer, from_server=False),
            self._pump(upstream_reader, writer, client=writer, from_server=True),
        )
        # A reset connection ends its pumps with ConnectionResetError: expected here.
        # Cancelled at shutdown, end quietly: Python 3.11's stream server reports a
        # cancelled connection task as an error in a callback.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*pumps, return_exceptions=True)
        for each in (writer, upstream_writer):
            self._writers.discard(each)
            _reset(each)
        self._readers.pop(writer, None)
        self._cut_reply_of.discard(writer)
        self._pairs.pop(writer, None)
        self._forgotten.discard(writer)

    async def _pump(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        *,
        client: asyncio.StreamWriter,
        from_server: bool,
    ) -> None:
        while data := await source.read(65536):
            if client in self._forgotten:
                continue  # the path forgot this connection: its bytes vanish
            while not self._flowing.is_set():  # noqa: ASYNC110 - a partition: hold the bytes
                await asyncio.sleep(0.01)
            if from_server and (self._cut_next_reply or client in self._cut_reply_of):
                if client in self._cut_reply_of:
                    self._cut_reply_of.discard(client)
                else:
                    self._cut_next_reply = False
                self.replies_cut += 1
                _reset(client)
                return
            reader = None if from_server else self._readers.get(client)
            if reader is not None and reader.feed(data) and self._statement_cut:
                cut, self._statement_cut = self._statement_cut, None
                self.statements_cut[cut] += 1
                if cut == "before":  # the server never sees it: both sides reset
                    _reset(client)
                    _reset(sink)
                    return
                self._cut_reply_of.add(client)
            sink.write(data)
            await sink.drain()
        if client not in self._forgotten:  # a forgotten path drops the close as well
            sink.close()

    async def _shut_down(self) -> None:
        """Reset every connection, stop listening, and end every connection's task (a
        task left pending when the loop stops is reported at exit as destroyed)."""
        await self._reset_all()
        if self._server is not None:
            self._server.close()
        others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    def _end(self, pairs: dict[asyncio.StreamWriter, asyncio.StreamWriter]) -> None:
        """Forgotten connections' ends given up on by their kernels: both reset."""
        for client, upstream in pairs.items():
            if client in self._forgotten:
                _reset(client)
                _reset(upstream)

    async def _reset_all(self) -> None:
        for writer in list(self._writers):
            _reset(writer)
        self._writers.clear()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST rather than FIN, as a dead host or a cut cable looks to the peer."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
