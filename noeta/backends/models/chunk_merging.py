"""A provider's HTTP/1.1 responses re-framed as they are read: the chunks of a chunked body
that one read brings are handed on as one chunk. A server sends each streamed event as a
chunk of its own, and the HTTP parser under httpx (h11) costs about 10 µs a chunk: for a
long reply, most of what streaming costs the worker (ADR-0111). The bytes of the body are
the same; only where its chunks are cut changes, which HTTP leaves to each hop.
"""

from __future__ import annotations

import ssl
import urllib.request
from collections.abc import Iterable

import httpcore
import httpx

_HEX_DIGITS = b"0123456789abcdefABCDEF"
MAX_HEAD_BYTES = 64 * 1024  # h11's own bound on a response's head


class ChunkMerger:
    """Fed the bytes of a connection's responses as they come, returns the same responses
    with each read's whole chunks joined into one. What it cannot read (a head it does not
    understand, a malformed chunk) it hands on untouched from there, for h11 to refuse as
    it would have."""

    def __init__(self) -> None:
        self._state = self._head
        self._pending = b""  # bytes of a line not yet ended
        self._left = 0  # of the chunk being read, or of a body of known length
        self._crlf_due = False  # a chunk's payload was read: its line end comes next
        self._out: list[bytes] = []
        self._payload: list[bytes] = []

    def feed(self, data: bytes) -> bytes:
        data = self._pending + data if self._pending else data
        self._pending = b""
        while data:
            data = self._state(data)
        self._flush_payload()
        out, self._out = b"".join(self._out), []
        return out

    def end(self) -> bytes:
        """At the end of the connection: what was held back, for h11 to see cut short."""
        pending, self._pending = self._pending, b""
        return pending

    # Each state reads from the start of `data` and returns what it left unread; bytes it
    # cannot use yet go to `_pending`.

    def _head(self, data: bytes) -> bytes:
        end = data.find(b"\r\n\r\n")
        if end < 0:
            if len(data) > MAX_HEAD_BYTES:
                return self._pass(data)
            self._pending = data
            return b""
        head, rest = data[: end + 4], data[end + 4 :]
        self._out.append(head)
        lines = head.split(b"\r\n")
        try:
            status = int(lines[0].split(b" ", 2)[1])
        except (IndexError, ValueError):
            self._state = self._passing
            return rest
        fields = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            fields[name.strip().lower()] = value.strip().lower()
        if 100 <= status < 200 and status != 101:
            return rest  # an interim response: the final one follows
        if status in (204, 304):
            return rest
        if fields.get(b"transfer-encoding") == b"chunked":
            self._state = self._chunks
        elif fields.get(b"content-length", b"").isdigit():
            self._left = int(fields[b"content-length"])
            self._state = self._length if self._left else self._head
        else:  # read to the end of the connection, or a protocol switch
            self._state = self._passing
        return rest

    def _chunks(self, data: bytes) -> bytes:
        """Chunks, their payloads gathered; one loop, as a long reply has thousands."""
        payload, at, size = self._payload, 0, len(data)
        while at < size:
            if self._left:  # inside a chunk's payload
                taken = data[at : at + self._left]
                payload.append(taken)
                self._left -= len(taken)
                at += len(taken)
                self._crlf_due = not self._left
                continue
            if self._crlf_due:  # the line end after a payload
                if size - at < 2:
                    self._pending = data[at:]
                    return b""
                if data[at : at + 2] != b"\r\n":
                    return self._pass(data[at:])
                self._crlf_due = False
                at += 2
                continue
            end = data.find(b"\r\n", at)
            if end < 0:
                if size - at > 1024:
                    return self._pass(data[at:])
                self._pending = data[at:]
                return b""
            digits = data[at:end].partition(b";")[0].strip()
            if not digits or len(digits) > 16 or digits.strip(_HEX_DIGITS):
                return self._pass(data[at:])
            self._left = int(digits, 16)
            if self._left == 0:  # the last chunk, then trailers and a blank line: as they are
                self._flush_payload()
                self._out.append(data[at : end + 2])
                self._state = self._trailer
                return data[end + 2 :]
            at = end + 2
        return b""

    def _trailer(self, data: bytes) -> bytes:
        end = data.find(b"\r\n")
        if end < 0:
            self._pending = data
            return b""
        self._out.append(data[: end + 2])
        if end == 0:  # the blank line: the response is whole
            self._state = self._head
        return data[end + 2 :]

    def _length(self, data: bytes) -> bytes:
        taken = data[: self._left]
        self._out.append(taken)
        self._left -= len(taken)
        if self._left == 0:
            self._state = self._head
        return data[len(taken) :]

    def _passing(self, data: bytes) -> bytes:
        self._out.append(data)
        return b""

    def _pass(self, data: bytes) -> bytes:
        self._flush_payload()
        self._state = self._passing
        return self._passing(data)

    def _flush_payload(self) -> None:
        if self._payload:
            payload = b"".join(self._payload)
            self._payload.clear()
            self._out.append(b"%x\r\n%b\r\n" % (len(payload), payload))


class MergingStream(httpcore.AsyncNetworkStream):
    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner
        self._merger = ChunkMerger()

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        while True:
            data = await self._inner.read(max_bytes, timeout)
            if not data:
                return self._merger.end()
            merged = self._merger.feed(data)
            if merged:
                return merged

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> httpcore.AsyncNetworkStream:
        # Nothing was read before: the merger of the encrypted stream starts afresh.
        return MergingStream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> object:
        return self._inner.get_extra_info(info)


class MergingBackend(httpcore.AsyncNetworkBackend):
    def __init__(self) -> None:
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return MergingStream(stream)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def merging_transport(url: str) -> httpx.AsyncHTTPTransport | None:
    """httpx's own transport, its connections read through `MergingBackend`; None when a
    proxy is configured for `url` (httpx then keeps its own, which honours it)."""
    proxies = urllib.request.getproxies()
    host = httpx.URL(url).host
    if any(proxies.get(key) for key in (httpx.URL(url).scheme, "all")) and not (
        urllib.request.proxy_bypass(host)
    ):
        return None
    transport = httpx.AsyncHTTPTransport()
    # httpx has no parameter for a network backend; its pool is rebuilt as httpx builds
    # it (DEFAULT_LIMITS), with ours. test_chunk_merging checks the attribute still holds.
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=httpx.create_ssl_context(),
        max_connections=100,
        max_keepalive_connections=20,
        keepalive_expiry=5.0,
        network_backend=MergingBackend(),
    )
    return transport
