"""The only way out of a sandboxed command's network namespace: an HTTP proxy in the
worker that lets a command reach exactly what WebFetch may (`FetchPolicy`, web_access.py):
public addresses, plus the operator's `fetch_allow:`.

It takes HTTP/1.x `CONNECT host:port` (tunnels, for https and anything else) and
absolute-form requests (`GET http://host[:port]/path`, any method), resolves the host
itself, checks every address, and connects only to a checked one: there is no second
lookup a rebinding DNS server could answer differently. A refusal is a 403 whose reason
phrase and one-line body say why: curl shows the body of a refused plain request, Python
clients (pip) the phrase of a refused CONNECT; curl and git show only "403" for those.

Which variables a command's environment needs (measured: curl 7.88, git 2.39, wget 1.21,
pip 26, Python 3.11 urllib), each set to `http://127.0.0.1:PORT`:
- `http_proxy` (curl, git and wget read only the lowercase one) and `HTTP_PROXY`;
- `https_proxy` (wget reads only this one) and `HTTPS_PROXY`;
- `all_proxy` and `ALL_PROXY` (curl, git and pip read them; urllib and wget do not).
Set `no_proxy`/`NO_PROXY` to `localhost,127.0.0.1,::1`: loopback inside the namespace is
the command's own (a server it started), while through this proxy it is the worker's and
refused. git's `ssh://` and `git://` remotes use no proxy and cannot get out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from noeta.plugins.core.egress_request import (
    HEADER_END,
    Rejection,
    RequestHead,
    forwarded_request,
    ip_literal,
    parse_head,
    response_bytes,
    shown,
    tunnel_destination,
)
from noeta.plugins.core.web_access import FetchPolicy

log = logging.getLogger("noeta.egress")

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
Resolve = Callable[[str, int], Awaitable[list[str]]]
Connect = Callable[[str, int], Awaitable[Streams]]

RELAY_CHUNK = 64 * 1024
ADVICE = "commands may reach public addresses only (the operator can open others with fetch_allow)"

# Lookups get their own few threads: a command asking for many slow names must not take
# the default executor the worker's asyncio.to_thread calls share.
_LOOKUPS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="noeta-egress-lookup")


async def resolve_addresses(host: str, port: int) -> list[str]:
    """Every address of `host`, in the resolver's order."""
    found = await asyncio.get_running_loop().run_in_executor(
        _LOOKUPS, lambda: socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    )
    return list(dict.fromkeys(str(info[4][0]) for info in found))


async def open_tcp(address: str, port: int) -> Streams:
    """A TCP connection to an already-checked IP address (no lookup happens here)."""
    return await asyncio.open_connection(address, port, limit=RELAY_CHUNK)


@dataclass(frozen=True, slots=True)
class Admission:
    """The decision about one destination: its addresses, and why it is refused or None."""

    host: str
    port: int
    addresses: tuple[str, ...]
    refusal: str | None


class EgressProxy:
    """CONNECT and absolute-form HTTP to what `policy` allows; see the module docstring."""

    def __init__(
        self,
        policy: FetchPolicy,
        *,
        max_connections: int = 64,
        max_header_bytes: int = 16 * 1024,
        header_timeout: float = 10.0,
        connect_timeout: float = 10.0,
        idle_timeout: float = 300.0,
        resolve: Resolve = resolve_addresses,
        connect: Connect = open_tcp,
    ) -> None:
        self.policy = policy
        self.max_connections = max_connections
        self.max_header_bytes = max_header_bytes
        self.header_timeout = header_timeout
        self.connect_timeout = connect_timeout
        self.idle_timeout = idle_timeout
        self.resolve = resolve
        self.connect = connect

    async def serve(self, listener: socket.socket) -> None:
        """Accept on `listener` (bound, listening; you set it non-blocking) until cancelled;
        on cancellation close the listener and every connection it holds, then re-raise.
        `max_connections` bounds each `serve` call (one command) on its own."""
        loop = asyncio.get_running_loop()
        listener.setblocking(False)
        handlers: set[asyncio.Task[None]] = set()
        try:
            while True:
                try:
                    client, _ = await loop.sock_accept(listener)
                except (ConnectionAbortedError, InterruptedError):
                    continue
                except OSError as error:  # out of descriptors: back off, do not spin
                    log.warning("egress proxy cannot accept: %s", error.strerror)
                    await asyncio.sleep(0.5)
                    continue
                if len(handlers) >= self.max_connections:
                    _turn_away(client, self.max_connections)
                    continue
                handler = asyncio.create_task(self._handle(client))
                handlers.add(handler)
                handler.add_done_callback(handlers.discard)
        finally:
            listener.close()
            for handler in handlers:
                handler.cancel()
            if handlers:
                await asyncio.wait(handlers)

    async def admit(self, host: str, port: int) -> Admission:
        """Resolve `host` once (an IP literal is its own address) and decide with the rule
        WebFetch uses. A failed or slow lookup raises OSError or TimeoutError."""
        if ip_literal(host):
            addresses = [host]
        else:
            async with asyncio.timeout(self.connect_timeout):
                addresses = await self.resolve(host, port)
        return Admission(host, port, tuple(addresses), self.policy.refusal(host, port, addresses))

    async def _handle(self, client_socket: socket.socket) -> None:
        upstream: asyncio.StreamWriter | None = None
        try:
            reader, writer = await asyncio.open_connection(
                sock=client_socket, limit=self.max_header_bytes
            )
        except OSError:
            client_socket.close()
            return
        try:
            head = await self._read_head(reader)
            if head.method == "CONNECT":
                host, port = tunnel_destination(head.target)
                upstream_reader, upstream = await self._open(host, port)
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                host, port, request = forwarded_request(head)
                upstream_reader, upstream = await self._open(host, port)
                upstream.write(request)
            tunnel = head.method == "CONNECT"
            await self._relay((reader, writer), (upstream_reader, upstream), tunnel=tunnel)
        except Rejection as rejection:
            with contextlib.suppress(OSError):
                writer.write(response_bytes(rejection))
                async with asyncio.timeout(self.header_timeout):
                    await writer.drain()
        except (OSError, TimeoutError, EOFError):
            pass  # the client or the origin went away, or went quiet: nothing is owed
        except Exception as error:  # a bug here must cost one connection, not the proxy
            log.warning("egress proxy dropped a connection: %s", type(error).__name__)
        finally:
            writer.close()
            if upstream is not None:
                upstream.close()

    async def _read_head(self, reader: asyncio.StreamReader) -> RequestHead:
        try:
            async with asyncio.timeout(self.header_timeout):
                block = await reader.readuntil(HEADER_END)
        except asyncio.LimitOverrunError:
            raise Rejection(
                431, "Request Header Fields Too Large", "noeta: the request head is too long"
            ) from None
        except TimeoutError:
            raise Rejection(408, "Request Timeout", "noeta: no request arrived in time") from None
        except asyncio.IncompleteReadError:
            raise EOFError from None
        return parse_head(block)

    async def _open(self, host: str, port: int) -> Streams:
        try:
            admission = await self.admit(host, port)
        except (OSError, TimeoutError) as error:
            reason = "the lookup timed out" if isinstance(error, TimeoutError) else error.strerror
            raise Rejection(502, "Bad Gateway", f"noeta: cannot resolve {host}: {reason}") from None
        if admission.refusal is not None:
            log.warning("egress proxy refused %s: %s", shown(host, port), admission.refusal)
            raise Rejection(
                403,
                f"Forbidden by noeta: {admission.refusal}",
                f"noeta: {shown(host, port)} refused: {admission.refusal}; {ADVICE}",
            )
        failure = "no address"
        for address in admission.addresses:
            try:
                async with asyncio.timeout(self.connect_timeout):
                    return await self.connect(address, port)
            except TimeoutError:
                failure = "timed out"
            except OSError as error:
                failure = error.strerror or type(error).__name__
        raise Rejection(
            502, "Bad Gateway", f"noeta: cannot connect to {shown(host, port)}: {failure}"
        )

    async def _relay(
        self,
        client: Streams,
        upstream: Streams,
        *,
        tunnel: bool,
    ) -> None:
        """Copy both ways until both ends close, either fails, or neither moves for
        `idle_timeout`. A tunnel passes a half-close on; a forwarded request ends when
        the origin closes (it was sent `Connection: close`), so a keep-alive client does
        not hold a connection open."""
        activity = _Activity(asyncio.get_running_loop())
        upload = asyncio.create_task(self._pump(client[0], upstream[1], activity))
        download = asyncio.create_task(self._pump(upstream[0], client[1], activity))
        pending = {upload, download}
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                failures = [pump.exception() for pump in done]  # both, so neither is lost
                if failure := next((f for f in failures if f is not None), None):
                    raise failure
                if download in done and not tunnel:
                    return
        finally:
            for pump in pending:
                pump.cancel()
            if pending:
                await asyncio.wait(pending)
            for pump in pending:
                if not pump.cancelled():
                    pump.exception()  # a failure that raced the cancel is retrieved, not logged

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, activity: _Activity
    ) -> None:
        while True:
            try:
                async with asyncio.timeout(self.idle_timeout):
                    chunk = await source.read(RELAY_CHUNK)
            except TimeoutError:
                if activity.quiet_for() >= self.idle_timeout:
                    raise
                continue
            if not chunk:
                if sink.can_write_eof():
                    sink.write_eof()
                return
            activity.touch()
            sink.write(chunk)
            async with asyncio.timeout(self.idle_timeout):
                await sink.drain()


class _Activity:
    """When bytes last moved either way: a download's quiet upload side is not idle."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.last = loop.time()

    def touch(self) -> None:
        self.last = self.loop.time()

    def quiet_for(self) -> float:
        return self.loop.time() - self.last


def _turn_away(client: socket.socket, limit: int) -> None:
    """Over the limit: a best-effort 503 without a task or a wait, then close (Linux
    keeps the 503 readable even when unread request bytes turn the close into a RST)."""
    rejection = Rejection(
        503,
        "Service Unavailable",
        f"noeta: this command already has {limit} connections open through the proxy",
    )
    with contextlib.suppress(OSError):
        client.setblocking(False)
        client.send(response_bytes(rejection))
        client.shutdown(socket.SHUT_WR)
    client.close()
