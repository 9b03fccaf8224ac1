"""Which addresses WebFetch may connect to, decided where the connection is made.

Every hop of a redirect chain opens its connection through `GuardedBackend`, which
resolves the host itself, checks every address it got, and connects to a checked address:
there is no second lookup a rebinding DNS server could answer differently (ADR-0035).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

import anyio
import httpcore
import httpx

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolve = Callable[[str, int], Awaitable[list[str]]]


class AddressRefused(Exception):
    """A hop of the fetch would connect to an address no task may reach."""


@dataclass(frozen=True, slots=True)
class Opening:
    """One `fetch_allow:` entry: a host name or a network, on one port or on any."""

    host: str | None
    network: Network | None
    port: int | None


@dataclass(frozen=True, slots=True)
class FetchPolicy:
    """Public addresses are open; the operator's `fetch_allow:` opens named others."""

    openings: tuple[Opening, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> FetchPolicy:
        return cls(tuple(_opening(entry) for entry in entries))

    def refusal(self, host: str, port: int, addresses: Sequence[str]) -> str | None:
        """Why a connection to `host` (resolved to `addresses`) is refused, or None."""
        name = host.lower().rstrip(".")
        for opening in self.openings:
            if opening.host == name and opening.port in (None, port):
                return None
        if not addresses:
            return f"{host} resolves to no address"
        for text in addresses:
            address = ipaddress.ip_address(text.split("%", 1)[0])
            kind = _closed_kind(address)
            if kind is not None and not self._opens(address, port):
                shown = text if text == host else f"{host} ({text})"
                return f"{shown} is a {kind} address"
        return None

    def _opens(self, address: Address, port: int) -> bool:
        return any(
            opening.network is not None
            and address.version == opening.network.version
            and address in opening.network
            and opening.port in (None, port)
            for opening in self.openings
        )


def _closed_kind(address: Address) -> str | None:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local (cloud metadata)"
    if address.is_unspecified:
        return "unspecified"
    if address.is_multicast:
        return "multicast"
    if address.is_private:
        return "private"
    if not address.is_global:
        return "non-public"
    return None


def _opening(entry: str) -> Opening:
    """'example.com', 'example.com:8080', '10.0.0.0/8', '127.0.0.1:8080', '[::1]:8080'."""
    text, port = entry.strip(), None
    if text.startswith("["):
        inside, _, rest = text[1:].partition("]")
        text, port = inside, _port(entry, rest.removeprefix(":")) if rest else None
    elif text.count(":") == 1:
        text, _, port_text = text.partition(":")
        port = _port(entry, port_text)
    try:
        return Opening(None, ipaddress.ip_network(text, strict=False), port)
    except ValueError:
        pass
    name = text.lower().rstrip(".")
    if not name or any(c in name for c in "/:@ ") or name.startswith("-"):
        raise ValueError(f"fetch_allow: {entry!r} is not a host, host:port or network")
    return Opening(name, None, port)


def _port(entry: str, text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"fetch_allow: {entry!r} has no valid port after ':'")
    return int(text)


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
