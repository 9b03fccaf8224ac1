"""Who may use `noeta web` (ADR-0071): the bind rule (a non-loopback bind needs a chosen
token), the session cookie a browser gets for the token at /login, the Host a loopback
server answers to, and the CSRF tokens of its forms (an HMAC under a secret this process
drew at start, bound to the session, the form's path and time)."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import secrets
import time
from dataclasses import dataclass

from noeta.core.errors import ConfigError

TOKEN_ENV = "NOETA_WEB_TOKEN"
SESSION_COOKIE = "noeta_web_session"
# A form older than this is refused as stale: reload the page for a fresh one.
CSRF_MAX_AGE_SECONDS = 3600
MIN_TOKEN_CHARS = 16
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
# An HTTP Host header: a name or IPv4 address, or an [IPv6] literal, then an optional port.
# Nothing else (no userinfo, no second colon, no trailing text) names this server.
_AUTHORITY = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::[0-9]{1,5})?")
_ISSUED = re.compile(r"[0-9]{1,12}")


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
    if (
        not colon
        or not host
        or not (port.isascii() and port.isdigit())
        or not 0 <= int(port) <= 65535
    ):
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


def new_token() -> str:
    """The token of a server started without NOETA_WEB_TOKEN (printed once, in its link)."""
    return secrets.token_urlsafe(24)


def token_matches(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(_bytes(given), _bytes(token))


def host_of(authority: str | None) -> str | None:
    """The host a Host header names (lower case, an IPv6 literal without brackets), or
    None when the header is not a plain `host[:port]`."""
    found = _AUTHORITY.fullmatch(authority or "")
    return found.group(1).strip("[]").lower() if found else None


class Sessions:
    """Session cookies: `<id>.<hmac(token, id)>`. A browser trades the token for one at
    /login, so the token itself is never a cookie; a cookie made under another token is
    refused; and a restart with the same NOETA_WEB_TOKEN keeps the sessions."""

    def __init__(self, token: str) -> None:
        self._key = hashlib.sha256(b"noeta web session|" + _bytes(token)).digest()

    def new(self) -> str:
        session = secrets.token_urlsafe(18)
        return f"{session}.{self._mac(session)}"

    def session_of(self, cookie: str | None) -> str | None:
        """The session id `cookie` carries, if this server made it."""
        session, _, mac = (cookie or "").partition(".")
        if session and hmac.compare_digest(_bytes(mac), _bytes(self._mac(session))):
            return session
        return None

    def _mac(self, session: str) -> str:
        return hmac.new(self._key, _bytes(session), hashlib.sha256).hexdigest()


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


class CsrfTokens:
    """Tokens for this process's forms: `issue(session, path)` on the page, `check` on
    the POST. `path` is the decoded path (as routing sees it), never its encoded form.

    A token is `<unix seconds>.<hmac(secret, seconds|session|path)>`; the secret never
    leaves the process, so a restarted server refuses the old page's forms (stale,
    reload), and a token taken from another session's page is refused."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret or secrets.token_bytes(32)

    def issue(self, session: str, path: str, *, now: float | None = None) -> str:
        issued = int(time.time() if now is None else now)
        return f"{issued}.{self._mac(issued, session, path)}"

    def check(
        self, session: str, path: str, token: str | None, *, now: float | None = None
    ) -> str | None:
        """None if `token` is good for `session`'s POST to `path`, else why it is refused."""
        issued_text, _, mac = (token or "").partition(".")
        if not _ISSUED.fullmatch(issued_text) or not mac:
            return "the form carries no valid CSRF token"
        issued = int(issued_text)
        if not hmac.compare_digest(_bytes(mac), _bytes(self._mac(issued, session, path))):
            return "the form's CSRF token is not this server's (did it restart?)"
        age = (time.time() if now is None else now) - issued
        if not 0 <= age <= CSRF_MAX_AGE_SECONDS:
            return "the form is over an hour old"
        return None

    def _mac(self, issued: int, session: str, path: str) -> str:
        message = _bytes(f"{issued}|{session}|{path}")
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()
