"""What a sandboxed command asks the egress proxy (egress_proxy.py): the request head
parsed strictly, the destination of a CONNECT or an absolute-form request, the request
rewritten for the origin, and the error responses.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

HEADER_END = b"\r\n\r\n"
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer", "upgrade"})
HOST_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}")
TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


class Rejection(Exception):
    """A request the proxy answers with an error status and closes."""

    def __init__(self, status: int, phrase: str, text: str) -> None:
        super().__init__(text)
        self.status, self.phrase, self.text = status, phrase, text


@dataclass(frozen=True, slots=True)
class RequestHead:
    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]


def parse_head(block: bytes) -> RequestHead:
    bad = Rejection(400, "Bad Request", "noeta: the proxy could not parse the request")
    try:
        text = block.decode("ascii")
    except UnicodeDecodeError:
        raise bad from None
    lines = text[: -len(HEADER_END)].split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not TOKEN.fullmatch(parts[0]):
        raise bad
    method, target, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0") or not _visible(target):
        raise bad
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not TOKEN.fullmatch(name) or not _visible(value.replace("\t", " ")):
            raise bad  # also an obs-fold continuation line, whose name starts with a space
        headers.append((name, value.strip(" \t")))
    return RequestHead(method, target, version, headers)


def _visible(text: str) -> bool:
    return text.isprintable()  # ASCII by now: no control character, no CR or LF


def tunnel_destination(target: str) -> tuple[str, int]:
    """`host:port` or `[v6]:port` of a CONNECT, the port required."""
    bad = Rejection(400, "Bad Request", f"noeta: CONNECT needs host:port, not {target[:100]!r}")
    if target.startswith("["):
        host, close, rest = target[1:].partition("]")
        if not close or not rest.startswith(":"):
            raise bad
        port_text = rest[1:]
    else:
        host, _, port_text = target.rpartition(":")
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise bad
    return _checked_host(host, bad), int(port_text)


def forwarded_request(head: RequestHead) -> tuple[str, int, bytes]:
    """The destination of an absolute-form request, and the request in origin form with
    hop-by-hop and Proxy-* headers dropped and `Connection: close`."""
    bad = Rejection(
        400,
        "Bad Request",
        "noeta: the proxy takes CONNECT host:port or an absolute http:// URL",
    )
    try:
        url = urlsplit(head.target)
        port = 80 if url.port is None else url.port
    except ValueError:
        raise bad from None
    if url.scheme != "http" or not url.hostname or not 0 < port < 65536:
        raise bad
    host = _checked_host(url.hostname, bad)
    named = {
        option.strip().lower()
        for name, value in head.headers
        if name.lower() == "connection"
        for option in value.split(",")
    }
    kept = [
        f"{name}: {value}\r\n"
        for name, value in head.headers
        if name.lower() not in HOP_BY_HOP | named | {"host"}
        and not name.lower().startswith("proxy-")
    ]
    authority = f"[{host}]" if ":" in host else host
    if url.port is not None:
        authority += f":{port}"
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    request = (
        f"{head.method} {path} {head.version}\r\nHost: {authority}\r\n"
        + "".join(kept)
        + "Connection: close\r\n\r\n"
    )
    return host, port, request.encode("ascii")


def _checked_host(host: str, bad: Rejection) -> str:
    if ip_literal(host) or HOST_NAME.fullmatch(host):
        return host
    raise bad


def ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def shown(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def response_bytes(rejection: Rejection) -> bytes:
    body = (rejection.text + "\n").encode("ascii", "replace")
    phrase = rejection.phrase.encode("ascii", "replace")
    return (
        b"HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"
    ) % (rejection.status, phrase, len(body), body)
