"""The HTTP side of WebFetch's address check: every hop of a redirect chain opens its
connection through `GuardedBackend`, which resolves the host itself, checks every address
it got against the FetchPolicy (web_access.py), and connects to a checked address: there
is no second lookup a rebinding DNS server could answer differently (ADR-0035).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable

import anyio
import httpcore
import httpx

from noeta.plugins.core.web_access import AddressRefused, FetchPolicy

Resolve = Callable[[str, int], Awaitable[list[str]]]


async def resolve_host(host: str, port: int) -> list[str]:
    """Every address of `host` (an IP literal is its own), in the resolver's order."""
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
        return [host]
    except ValueError:
        pass
    try:
        found = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as error:
        raise httpcore.ConnectError(f"cannot resolve {host}: {error}") from error
    return list(dict.fromkeys(str(info[4][0]) for info in found))


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """Resolve, check every address, connect to a checked one; refuse before connecting."""

    def __init__(
        self,
        policy: FetchPolicy,
        backend: httpcore.AsyncNetworkBackend | None = None,
        resolve: Resolve = resolve_host,
    ) -> None:
        self.policy = policy
        self.backend = backend or httpcore.AnyIOBackend()
        self.resolve = resolve

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await self.resolve(host, port)
        refusal = self.policy.refusal(host, port, addresses)
        if refusal is not None:
            raise AddressRefused(refusal)
        failure: Exception | None = None
        for address in addresses:  # TLS still names `host` (SNI, certificate): httpcore
            try:  # passes the URL's host to start_tls, not this address
                return await self.backend.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as error:
                failure = error
        assert failure is not None
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise AddressRefused("WebFetch does not connect to local sockets")

    async def sleep(self, seconds: float) -> None:
        await self.backend.sleep(seconds)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's transport with every connection opened by a `GuardedBackend`; no proxies
    from the environment (a proxy would connect where this cannot check)."""

    def __init__(self, backend: GuardedBackend) -> None:
        super().__init__(trust_env=False)
        # httpx has no public hook for the network backend; its own pool is replaced by
        # the same httpcore pool built with ours (tests/plugins/core/test_web_access.py
        # fails if a later httpx stops using it).
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            network_backend=backend,
        )
