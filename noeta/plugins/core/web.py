"""WebFetch: one HTTP GET of a text resource, decoded and, for HTML, stripped to its text.

Only public addresses are fetched, on every redirect hop, unless the operator opens others
(`web_access`). The download stops at a byte cap, and decoding gzip or deflate stops at
the same cap of decoded bytes (off the event loop), so a small compression bomb stays
small; the text shown stops at a character cap; each says when it cut. One time limit
covers the whole fetch.
"""

from __future__ import annotations

import asyncio
import codecs
import re
import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from noeta.core.ports.payload import JSONValue
from noeta.core.ports.tool import ToolContext, ToolError, ToolFlags, ToolOutput
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
# The codings asked for, and the only ones decoded: each by a decompressor that stops at
# the byte cap. Stacked codings ("gzip, gzip") are refused: no page needs them, and each
# layer multiplies what a small body becomes.
ACCEPTED_CODINGS = ("gzip", "x-gzip", "deflate")

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
        url = Arguments(self.name, input, self.input_schema).string("url")
        _check_url(url)
        try:  # the time limit of the whole fetch: httpx's own bounds each read only
            async with asyncio.timeout(self.timeout_seconds):
                response, coding, raw, complete = await self._download(url)
        except TimeoutError:
            raise ToolError(self._too_slow(url)) from None
        # Decoding and reducing HTML cost CPU in proportion to the cap: not on the loop.
        return await asyncio.to_thread(self._finish, response, coding, raw, complete)

    def _too_slow(self, url: str) -> str:
        return (
            f"WebFetch: {url} did not answer within {self.timeout_seconds:g} s "
            "(the time limit of the whole fetch)"
        )

    async def _download(self, url: str) -> tuple[httpx.Response, str, bytes, bool]:
        """The response, its content coding and its raw (still encoded) body, capped."""
        import httpx

        from noeta.plugins.core.web_transport import GuardedBackend, GuardedTransport

        backend = GuardedBackend(self.policy, self.network_backend)
        async with httpx.AsyncClient(
            transport=GuardedTransport(backend),
            timeout=self.timeout_seconds,
            follow_redirects=True,
            max_redirects=MAX_REDIRECTS,
            headers={"User-Agent": USER_AGENT, "Accept-Encoding": "gzip, deflate"},
        ) as client:
            try:
                async with client.stream("GET", url) as response:
                    coding = _content_coding(url, response.headers.get("content-encoding"))
                    raw, complete = await self._read_capped(response)
            except httpx.TimeoutException as error:
                raise ToolError(self._too_slow(url)) from error
            except httpx.HTTPError as error:
                raise ToolError(f"WebFetch: cannot fetch {url}: {error}") from error
            except AddressRefused as refused:
                raise ToolError(
                    f"WebFetch: refused to fetch {url}: {refused} (directly or by a redirect); "
                    "only public internet addresses can be fetched"
                ) from None
        return response, coding, raw, complete

    async def _read_capped(self, response: httpx.Response) -> tuple[bytes, bool]:
        body = bytearray()
        async for chunk in response.aiter_raw():  # as sent: decoded later, bounded
            body += chunk
            if len(body) > self.max_bytes:
                return bytes(body[: self.max_bytes]), False
        return bytes(body), True

    def _finish(
        self, response: httpx.Response, coding: str, raw: bytes, complete: bool
    ) -> ToolOutput:
        body, decoded_whole = decode_bounded(raw, coding, self.max_bytes)
        return self._render(response, body, complete and decoded_whole)

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


def _content_coding(url: str, header: str | None) -> str:
    """The one content coding of a response ("" for none); ToolError for any other."""
    codings = [c.strip().lower() for c in (header or "").split(",")]
    codings = [c for c in codings if c not in ("", "identity")]
    if len(codings) > 1:
        raise ToolError(
            f"WebFetch: {url} sent stacked content codings ({header!r}); WebFetch decodes "
            "one coding at most, so that a small body cannot decode to an unbounded one"
        )
    if codings and codings[0] not in ACCEPTED_CODINGS:
        raise ToolError(
            f"WebFetch: {url} sent content coding {codings[0]!r}, which WebFetch does not "
            "decode (it asks for gzip or deflate)"
        )
    return codings[0] if codings else ""


def decode_bounded(raw: bytes, coding: str, cap: int) -> tuple[bytes, bool]:
    """`raw` decoded by `coding` ("" is none), at most `cap` bytes of the result, and
    whether all of it fitted. The decompressor is told to stop past the cap, so memory
    stays near `cap` whatever the body decodes to."""
    if not coding:
        return raw[:cap], len(raw) <= cap
    if coding == "deflate":  # usually zlib-wrapped as the RFC says; some servers send raw
        wbits = zlib.MAX_WBITS if _has_zlib_header(raw) else -zlib.MAX_WBITS
    else:
        wbits = zlib.MAX_WBITS | 16
    decoded = bytearray()
    rest, first = raw, True
    while rest and len(decoded) <= cap:
        decompressor = zlib.decompressobj(wbits)
        try:
            decoded += decompressor.decompress(rest, cap + 1 - len(decoded))
        except zlib.error as error:
            if first:
                raise ToolError(f"WebFetch: the body is not valid {coding}: {error}") from None
            break  # bytes after the last gzip member: ignored, as browsers do
        if not decompressor.eof:
            break  # at the cap, or the (capped) download ended mid-stream
        rest, first = decompressor.unused_data, False  # gzip allows several members
    return bytes(decoded[:cap]), len(decoded) <= cap


def _has_zlib_header(data: bytes) -> bool:
    return len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0


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
