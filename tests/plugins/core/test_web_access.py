"""WebFetch refuses loopback, link-local, private and other non-public addresses on every
hop, before connecting; the operator's fetch_allow opens named ones.

Every fetch here goes through `LoopbackOnly`, which records each connection attempt and
refuses, without sending anything, to connect anywhere but 127.0.0.1 or ::1: a broken
guard makes these tests fail, never reach the network.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpcore
import pytest

from noeta.core.ports.tool import ToolContext, ToolError
from noeta.plugins.core import WebFetch, plugin
from noeta.plugins.core.web_access import FetchPolicy
from noeta.plugins.core.web_transport import GuardedBackend


class LoopbackOnly(httpcore.AnyIOBackend):
    def __init__(self) -> None:
        self.attempts: list[tuple[str, int]] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.attempts.append((host, port))
        if host not in ("127.0.0.1", "::1"):
            raise AssertionError(f"a test tried to connect to {host}:{port}")
        return await super().connect_tcp(host, port, timeout, local_address, socket_options)


class _Handler(BaseHTTPRequestHandler):
    hits: list[str]
    redirects: dict[str, str]

    def do_GET(self) -> None:
        self.hits.append(self.path)
        if self.path in self.redirects:
            self.send_response(302)
            self.send_header("Location", self.redirects[self.path])
            self.end_headers()
            return
        body = b"the internal secret page"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class Server:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self.hits: list[str] = []
        self.redirects: dict[str, str] = {}
        handler = type("H", (_Handler,), {"hits": self.hits, "redirects": self.redirects})
        self.http = ThreadingHTTPServer((host, 0), handler)
        self.port = int(self.http.server_address[1])
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()
        self.thread.join()


@pytest.fixture
def server() -> Iterator[Server]:
    started = Server()
    yield started
    started.close()


@pytest.fixture
def other_server() -> Iterator[Server]:
    started = Server()
    yield started
    started.close()


def fetcher(*allow: str) -> tuple[WebFetch, LoopbackOnly]:
    backend = LoopbackOnly()
    return WebFetch(fetch_allow=allow, network_backend=backend), backend


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("http://127.0.0.1:{port}/", "loopback"),
        ("http://[::1]:{port}/", "loopback"),
        ("http://localhost:{port}/", "loopback"),
        ("http://[::ffff:127.0.0.1]:{port}/", "loopback"),
        ("http://0.0.0.0:{port}/", "unspecified"),
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://[fe80::1]/", "link-local"),
        ("http://10.0.0.1/", "private"),
        ("http://192.168.1.1/", "private"),
        ("http://[fd00:ec2::254]/", "private"),
        ("http://100.100.100.200/", "non-public"),
        ("http://224.0.0.1/", "multicast"),
        # IPv6 addresses that carry an IPv4 one are judged by it: NAT64 (the well-known
        # prefix and the local-use one), IPv4-compatible and mapped, 6to4.
        ("http://[64:ff9b::7f00:1]:{port}/", "loopback"),
        ("http://[64:ff9b::a00:1]/", "private"),
        ("http://[64:ff9b:1::7f00:1]/", "loopback"),
        ("http://[64:ff9b:1::a00:1]/", "private"),
        ("http://[::7f00:1]:{port}/", "loopback"),
        ("http://[::a00:1]/", "private"),
        ("http://[::ffff:a00:1]/", "private"),
        ("http://[2002:a00:1::1]/", "private"),
        ("http://[64:ff9b:1::808:808]/", "local-use NAT64"),  # a site's own translator
    ],
)
async def test_non_public_addresses_are_refused_before_connecting(
    server: Server, ctx: ToolContext, url: str, kind: str
) -> None:
    fetch, backend = fetcher()
    with pytest.raises(ToolError, match=rf"refused to fetch .* is a {kind}"):
        await fetch.run({"url": url.format(port=server.port)}, ctx)
    assert backend.attempts == []
    assert server.hits == []


async def test_an_allowed_host_and_port_is_fetched(server: Server, ctx: ToolContext) -> None:
    fetch, backend = fetcher(f"127.0.0.1:{server.port}")
    output = await fetch.run({"url": f"http://127.0.0.1:{server.port}/page"}, ctx)
    assert "the internal secret page" in output.content
    assert backend.attempts == [("127.0.0.1", server.port)]


@pytest.mark.parametrize("target", ["http://127.0.0.1:{port}/page", "http://localhost:{port}/"])
async def test_a_redirect_from_an_allowed_server_to_another_local_one_is_refused(
    server: Server, other_server: Server, ctx: ToolContext, target: str
) -> None:
    server.redirects["/go"] = target.format(port=other_server.port)
    fetch, backend = fetcher(f"127.0.0.1:{server.port}")
    with pytest.raises(ToolError, match=r"refused to fetch .* is a loopback address"):
        await fetch.run({"url": f"http://127.0.0.1:{server.port}/go"}, ctx)
    assert server.hits == ["/go"]
    assert other_server.hits == []
    assert backend.attempts == [("127.0.0.1", server.port)]


async def test_a_network_entry_opens_the_addresses_in_it(
    server: Server, other_server: Server, ctx: ToolContext
) -> None:
    server.redirects["/go"] = f"http://127.0.0.1:{other_server.port}/page"
    fetch, _ = fetcher("127.0.0.0/8")
    output = await fetch.run({"url": f"http://127.0.0.1:{server.port}/go"}, ctx)
    assert "the internal secret page" in output.content and other_server.hits == ["/page"]


async def test_the_connection_goes_to_the_address_that_was_checked() -> None:
    """No second lookup: a rebinding DNS server cannot swap the address after the check."""
    lookups: list[str] = []

    async def rebinding(host: str, port: int) -> list[str]:
        lookups.append(host)
        return ["93.184.216.34"] if len(lookups) == 1 else ["127.0.0.1"]

    class Recorder(LoopbackOnly):
        async def connect_tcp(
            self, host: str, port: int, *rest: object
        ) -> httpcore.AsyncNetworkStream:  # type: ignore[override]
            self.attempts.append((host, port))
            raise httpcore.ConnectError("recorded, not connected")

    recorder = Recorder()
    guard = GuardedBackend(FetchPolicy(), recorder, resolve=rebinding)
    with pytest.raises(httpcore.ConnectError):
        await guard.connect_tcp("rebind.example", 80)
    assert lookups == ["rebind.example"]
    assert recorder.attempts == [("93.184.216.34", 80)]


@pytest.mark.parametrize("entry", ["http://x", "host:notaport", "10.0.0.0/33x", "", "a b"])
def test_a_bad_fetch_allow_entry_is_refused_at_start_up(entry: str) -> None:
    with pytest.raises(ValueError, match="fetch_allow"):
        plugin({"fetch_allow": [entry]})
