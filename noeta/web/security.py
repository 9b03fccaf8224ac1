"""Who may use `noeta web` (ADR-0071): the bind rule (loopback, or a token), the token
every request then carries, and the CSRF tokens of its forms (an HMAC under a secret
this process drew at start, bound to the form's path and time)."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import time
from dataclasses import dataclass

from noeta.core.errors import ConfigError

TOKEN_ENV = "NOETA_WEB_TOKEN"
TOKEN_COOKIE = "noeta_web_token"
# A form older than this is refused as stale: reload the page for a fresh one.
CSRF_MAX_AGE_SECONDS = 3600
MIN_TOKEN_CHARS = 16
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True, slots=True)
class Bind:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False  # a name: it may resolve to anything

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_bind(text: str) -> Bind:
    """HOST:PORT ([v6]:PORT for IPv6); PORT 0 lets the system choose."""
    host, colon, port = text.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--bind must be HOST:PORT (e.g. 127.0.0.1:8787), not {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return Bind(host, int(port))


def check_token_rule(bind: Bind, token: str | None) -> None:
    """A non-loopback bind needs a token; a token, when set, must not be guessable."""
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(f"{TOKEN_ENV} must be at least {MIN_TOKEN_CHARS} characters")
    if not bind.loopback and token is None:
        raise ConfigError(
            f"refusing to serve on {bind}, which is not a loopback address, without "
            f"{TOKEN_ENV}: set it, and every request must then carry it"
        )


def token_matches(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


class CsrfTokens:
    """Tokens for this process's forms: `issue(path)` on the page, `check` on the POST.

    A token is `<unix seconds>.<hmac(secret, seconds|path)>`; the secret never leaves the
    process, so a restarted server refuses the old page's forms (stale, reload)."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret or secrets.token_bytes(32)

    def issue(self, path: str, *, now: float | None = None) -> str:
        issued = int(time.time() if now is None else now)
        return f"{issued}.{self._mac(issued, path)}"

    def check(self, path: str, token: str | None, *, now: float | None = None) -> str | None:
        """None if `token` is good for a POST to `path`, else why it is refused."""
        issued_text, _, mac = (token or "").partition(".")
        if not issued_text.isdigit() or not mac:
            return "the form carries no valid CSRF token"
        issued = int(issued_text)
        if not hmac.compare_digest(mac, self._mac(issued, path)):
            return "the form's CSRF token is not this server's (did it restart?)"
        age = (time.time() if now is None else now) - issued
        if not 0 <= age <= CSRF_MAX_AGE_SECONDS:
            return "the form is over an hour old"
        return None

    def _mac(self, issued: int, path: str) -> str:
        message = f"{issued}|{path}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()
