"""The egress proxy lets a sandboxed command reach what WebFetch may reach and nothing
else, and bounds what a malformed or hostile client can hold.

Nothing here leaves 127.0.0.1: a "public" or "private" host is a name the injected
resolver maps to such an address, and the injected connect either hands back a stream
to a local server or fails the test when called.
"""

from __future__ import annotations

import asyncio

import pytest

from noeta.plugins.core.egress_proxy import EgressProxy
from noeta.plugins.core.web_access import FetchPolicy
from tests.plugins.core.egress_peers import (
    PUBLIC,
    Origin,
    Seams,
    echoed,
    exchange,
    serving,
    tunnel,
)


@pytest.mark.parametrize(
    "request_head",
    [
        b"GET http://internal.test/ HTTP/1.1\r\n\r\n",
        b"CONNECT internal.test:443 HTTP/1.1\r\n\r\n",
        b"CONNECT 10.1.2.3:443 HTTP/1.1\r\n\r\n",
        b"GET http://10.1.2.3:8080/ HTTP/1.1\r\n\r\n",
        b"CONNECT mixed.test:443 HTTP/1.1\r\n\r\n",
        b"CONNECT [::1]:5432 HTTP/1.1\r\n\r\n",
        b"CONNECT [::ffff:127.0.0.1]:5432 HTTP/1.0\r\n\r\n",
        b"CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n",
    ],
)
async def test_a_non_public_address_is_refused_before_any_connect(request_head: bytes) -> None:
    seams = Seams()
    proxy = EgressProxy(FetchPolicy(), resolve=seams.resolve, connect=seams.connect)
    async with serving(proxy) as port:
        answer = await exchange(port, request_head)
    status, _, body = answer.partition(b"\r\n")
    assert status.startswith(b"HTTP/1.1 403 Forbidden by noeta: ")
    assert body.endswith(
        b"commands may reach public addresses only "
        b"(the operator can open others with fetch_allow)\n"
    )
    assert seams.connects == []


async def test_the_decision_follows_the_webfetch_rule() -> None:
    seams = Seams()
    proxy = EgressProxy(FetchPolicy(), resolve=seams.resolve, connect=seams.connect)
    public = await proxy.admit("public.test", 443)
    assert (public.addresses, public.refusal) == ((PUBLIC,), None)
    internal = await proxy.admit("internal.test", 443)
    assert internal.refusal == "internal.test (10.1.2.3) is a private address"
    mixed = await proxy.admit("mixed.test", 443)
    assert mixed.refusal == "mixed.test (127.0.0.1) is a loopback address"
    assert (await proxy.admit("10.1.2.3", 443)).refusal == "10.1.2.3 is a private address"


async def test_a_public_address_is_connected_to_as_checked_and_bytes_flow() -> None:
    async with Origin() as origin:
        seams = Seams(origin=origin.port)
        proxy = EgressProxy(FetchPolicy(), resolve=seams.resolve, connect=seams.connect)
        async with serving(proxy) as port:
            assert await echoed(await tunnel(port, "public.test:443"), b"tls bytes") == b"tls bytes"
            answer = await exchange(
                port,
                b"POST http://public.test/submit HTTP/1.1\r\nHost: evil.test\r\n"
                b"Proxy-Authorization: Basic c2VjcmV0\r\nConnection: keep-alive, X-Hop\r\n"
                b"X-Hop: 1\r\nContent-Length: 0\r\n\r\n",
            )
    assert seams.connects == [(PUBLIC, 443), (PUBLIC, 80)]
    assert answer.endswith(b"hello from the origin")
    assert origin.heads[1] == (
        b"POST /submit HTTP/1.1\r\nHost: public.test\r\nContent-Length: 0\r\n"
        b"Connection: close\r\n\r\n"
    )


@pytest.mark.parametrize(
    "request_head",
    [
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
        b"GET /relative HTTP/1.1\r\nHost: public.test\r\n\r\n",
        b"GET https://public.test/ HTTP/1.1\r\n\r\n",
        b"CONNECT public.test HTTP/1.1\r\n\r\n",
        b"CONNECT public.test:0 HTTP/1.1\r\n\r\n",
        b"CONNECT public.test:99999 HTTP/1.1\r\n\r\n",
        b"CONNECT pub\x01lic.test:443 HTTP/1.1\r\n\r\n",
        b"GET http://public.test/ HTTP/1.1\r\nX-Folded: a\r\n b\r\n\r\n",
        b"GET http://public.test/ SPDY/3\r\n\r\n",
    ],
)
async def test_a_malformed_request_answers_400_and_the_proxy_keeps_serving(
    request_head: bytes,
) -> None:
    async with Origin() as origin:
        seams = Seams(origin=origin.port)
        proxy = EgressProxy(FetchPolicy(), resolve=seams.resolve, connect=seams.connect)
        async with serving(proxy) as port:
            assert (await exchange(port, request_head)).startswith(b"HTTP/1.1 400 Bad Request\r\n")
            assert seams.connects == []
            assert await echoed(await tunnel(port, "public.test:443"), b"still") == b"still"


async def test_an_over_long_request_head_answers_431_and_closes() -> None:
    seams = Seams()
    proxy = EgressProxy(
        FetchPolicy(), max_header_bytes=1024, resolve=seams.resolve, connect=seams.connect
    )
    async with serving(proxy) as port:
        answer = await exchange(
            port, b"GET http://public.test/ HTTP/1.1\r\nX-Long: " + b"a" * 4096 + b"\r\n\r\n"
        )
    assert answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
    assert seams.connects == []


async def test_a_connection_over_the_limit_answers_503() -> None:
    proxy = EgressProxy(FetchPolicy(), max_connections=2, header_timeout=3600)
    async with serving(proxy) as port:
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
        answer = await exchange(port, b"GET /relative HTTP/1.1\r\n\r\n" * 100)
        assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
        assert answer.endswith(b"already has 2 connections open through the proxy\n")
        for _, writer in held:
            writer.close()


async def test_a_silent_client_is_closed_at_the_header_timeout() -> None:
    proxy = EgressProxy(FetchPolicy(), header_timeout=0.2)
    async with serving(proxy) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        answer = await reader.read()
        writer.close()
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n")


async def test_an_idle_tunnel_is_closed() -> None:
    async with Origin() as origin:
        seams = Seams(origin=origin.port)
        proxy = EgressProxy(
            FetchPolicy(), idle_timeout=0.2, resolve=seams.resolve, connect=seams.connect
        )
        async with serving(proxy) as port:
            reader, writer = await tunnel(port, "public.test:443")  # then nothing moves
            assert await reader.read() == b""
            await origin.closed.wait()
            writer.close()


async def test_cancelling_serve_closes_open_tunnels() -> None:
    async with Origin() as origin:
        seams = Seams(origin=origin.port)
        proxy = EgressProxy(FetchPolicy(), resolve=seams.resolve, connect=seams.connect)
        async with serving(proxy) as port:
            reader, writer = await tunnel(port, "public.test:443")
            assert await echoed((reader, writer), b"open") == b"open"
        assert await reader.read() == b""
        await origin.closed.wait()
        writer.close()
