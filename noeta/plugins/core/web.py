"""WebFetch: one HTTP GET of a text resource, decoded and, for HTML, stripped to its text.

Only public addresses are fetched, on every redirect hop, unless the operator opens others
(`web_access`). The download stops at a byte cap (after decompression, so a small gzip
bomb stays small) and the text shown stops at a character cap; both say when they cut.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from noeta.core.payload import JSONValue
from noeta.core.tool import ToolContext, ToolError, ToolFlags, ToolOutput
from noeta.plugins.core.arguments import Arguments
from noeta.plugins.core.web_access import AddressRefused, FetchPolicy

if TYPE_CHECKING:  # httpx is imported by a fetch, not by loading the tools (ADR-0056)
    import httpcore
    import httpx

DEFAULT_TIMEOUT_SECONDS = 30.0
MAX_FETCH_BYTES = 5 * 1024 * 1024
DEFAULT_OUTPUT_CAP_CHARS = 30_000
MAX_REDIRECTS = 5
USER_AGENT = "noeta-webfetch/1"

_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/javascript")
_TEXT_SUFFIXES = ("+json", "+xml")

_SCHEMA: dict[str, JSONValue] = {
    "type": "object",
    "properties": {
        "url": {"type": "string", "description": "The http:// or https:// URL to fetch."},
    },
    "required": ["url"],
    "additionalProperties": False,
}

_DROPPED_ELEMENTS = re.compile(
    r"<(script|style|noscript|template|svg)\b.*?</\1\s*>|<!--.*?-->", re.IGNORECASE | re.DOTALL
)
_BLOCK_ENDS = re.compile(r"<(br|/p|/div|/li|/tr|/h[1-6]|/section|/article|/pre)\b[^>]*>", re.I)
_TAG = re.compile(r"<[^>]*>")
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([\w.:-]+)""", re.IGNORECASE)


class WebFetch:
    name = "WebFetch"
    input_schema = _SCHEMA
    flags = ToolFlags(retry_safe=True)  # a GET changes nothing, per HTTP's own rules

    def __init__(
        self,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        max_bytes: int = MAX_FETCH_BYTES,
        output_cap_chars: int = DEFAULT_OUTPUT_CAP_CHARS,
        fetch_allow: Sequence[str] = (),
        network_backend: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        self.timeout_seconds = timeout_seconds
        self.max_bytes = max_bytes
        self.output_cap_chars = output_cap_chars
        self.policy = FetchPolicy.parse(fetch_allow)  # ValueError names a bad entry
        self.network_backend = network_backend  # where checked connections are made
        self.description = (
            "Fetch a web page or other text resource by HTTP GET (http and https only) and "
            "return its status and text; HTML is reduced to its text. Binary content is not "
            f"shown. Text over {output_cap_chars:,} characters is cut. Only public internet "
            "addresses can be fetched."
        )

    async def run(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput:
        import httpx

        from noeta.plugins.core.web_transport import GuardedBackend, GuardedTransport

        url = Arguments(self.name, input, self.input_schema).string("url")
        _check_url(url)
        backend = GuardedBackend(self.policy, self.network_backend)
        async with httpx.AsyncClient(
            transport=GuardedTransport(backend),
            timeout=self.timeout_seconds,
            follow_redirects=True,
            max_redirects=MAX_REDIRECTS,
            headers={"User-Agent": USER_AGENT},
        ) as client:
            try:
                async with client.stream("GET", url) as response:
                    body, complete = await self._read_capped(response)
            except httpx.TimeoutException as error:
                raise ToolError(
                    f"WebFetch: {url} did not answer within {self.timeout_seconds:g} s"
                ) from error
            except httpx.HTTPError as error:
                raise ToolError(f"WebFetch: cannot fetch {url}: {error}") from error
            except AddressRefused as refused:
                raise ToolError(
                    f"WebFetch: refused to fetch {url}: {refused} (directly or by a redirect); "
                    "only public internet addresses can be fetched"
                ) from None
        return self._render(response, body, complete)

    async def _read_capped(self, response: httpx.Response) -> tuple[bytes, bool]:
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > self.max_bytes:
                return bytes(body[: self.max_bytes]), False
        return bytes(body), True

    def _render(self, response: httpx.Response, body: bytes, complete: bool) -> ToolOutput:
        content_type = response.headers.get("content-type", "")
        media_type = content_type.split(";", 1)[0].strip().lower()
        status = f"HTTP {response.status_code} {response.reason_phrase}".rstrip()
        heading = f"{status} · {media_type or 'no content type'} · {response.url}"
        is_error = response.status_code >= 400
        if not _is_text(media_type, body):
            return ToolOutput(
                f"{heading}\n\n(not text: {len(body):,} bytes of {media_type or 'binary'} "
                "data, not shown)",
                is_error=True,
            )
        text = _decode(body, response.charset_encoding, media_type)
        if media_type in ("text/html", "application/xhtml+xml"):
            text = _strip_html(text)
        notes: list[str] = []
        if not complete:
            notes.append(f"[download stopped at {self.max_bytes:,} bytes; the rest is unread]")
        if len(text) > self.output_cap_chars:
            notes.append(f"[text cut at {self.output_cap_chars:,} of {len(text):,} characters]")
            text = text[: self.output_cap_chars]
        parts = [heading, "", text.strip() or "(empty body)", *notes]
        return ToolOutput("\n".join(parts), is_error=is_error)


def _check_url(url: str) -> None:
    import httpx

    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as error:
        raise ToolError(f"WebFetch: {url!r} is not a valid URL: {error}") from error
    if parsed.scheme not in ("http", "https"):
        scheme = parsed.scheme or "no scheme"
        raise ToolError(f"WebFetch: only http and https URLs can be fetched, not {scheme}")
    if not parsed.host:
        raise ToolError(f"WebFetch: {url!r} names no host")


def _is_text(media_type: str, body: bytes) -> bool:
    if not media_type:  # no header: judge by content, as browsers sniff
        return b"\x00" not in body[:8192]
    return media_type.startswith(_TEXT_TYPES) or media_type.endswith(_TEXT_SUFFIXES)


def _decode(body: bytes, charset: str | None, media_type: str) -> str:
    """By the header's charset, else an HTML meta charset, else UTF-8; never fails."""
    if charset is None and "html" in media_type:
        found = _META_CHARSET.search(body[:4096])
        charset = found.group(1).decode("ascii") if found else None
    try:
        codecs.lookup(charset or "utf-8")
    except LookupError:
        charset = None
    return body.decode(charset or "utf-8", errors="replace").replace("\x00", "\\x00")


def _strip_html(text: str) -> str:
    """A crude reader view: drop scripts and tags, keep block breaks, unescape entities."""
    import html  # its entity table is large, and loading the tools needs none of it

    text = _DROPPED_ELEMENTS.sub(" ", text)
    text = _BLOCK_ENDS.sub("\n", text)
    text = html.unescape(_TAG.sub(" ", text))
    lines = (" ".join(line.split()) for line in text.splitlines())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines))
