"""Which addresses WebFetch may connect to: the policy, public addresses and the
operator's `fetch_allow:` openings. It is applied where the connection is made, by
web_transport.py's `GuardedBackend` (ADR-0035); this module imports no HTTP library, so
the built-in plugin loads without httpx (ADR-0056).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


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
        judged = _embedded_ipv4(address) or address
        return any(
            opening.network is not None
            and candidate.version == opening.network.version
            and candidate in opening.network
            and opening.port in (None, port)
            for opening in self.openings
            for candidate in (address, judged)
        )


# IPv6 ranges whose addresses carry an IPv4 one that a translator or tunnel connects to:
# NAT64's well-known prefix and its local-use one (RFC 6052, 8215: the /96 form), and
# IPv4-compatible addresses (deprecated, still routed by some stacks).
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_LOCAL_NAT64 = ipaddress.IPv6Network("64:ff9b:1::/48")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")


def _embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one leads to (mapped, NAT64, compatible, 6to4), if any."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    in_compatible = address in _IPV4_COMPATIBLE and int(address) > 1  # not :: nor ::1
    if address in _NAT64 or address in _LOCAL_NAT64 or in_compatible:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _closed_kind(address: Address) -> str | None:
    embedded = _embedded_ipv4(address)
    kind = _closed_kind_of(embedded or address)
    if kind is None and address in _LOCAL_NAT64:
        return "local-use NAT64"  # a site's own translator: not a public address
    return kind


def _closed_kind_of(address: Address) -> str | None:
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
