"""What every provider adapter shares: deterministic JSON bytes, and one HTTP attempt that
either yields a parsed reply (streamed, or a JSON body from a server that would not stream)
or raises `ProviderError` saying whether to try again.
"""

from __future__ import annotations

import asyncio
import datetime
import email.utils
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, TypeVar

import httpx

from noeta.backends.models.chunk_merging import merging_transport
from noeta.backends.models.sse import EventStreamDecoder, EventStreamError, ServerSentEvent
from noeta.core.errors import ConfigError, PayloadError
from noeta.core.ports.model import ModelReply, OnDelta, ProviderError, ReplyDelta
from noeta.core.ports.payload import MAX_ENCODED_BYTES

T = TypeVar("T")

MAX_DETAIL_CHARS = 500  # of a provider's error message: enough to act on, short in a log
# A reply's bytes on the wire, streamed or not: more than one event of the log may hold
# could never be recorded, and a stream of that size is many times the largest reply.
MAX_REPLY_BYTES = MAX_ENCODED_BYTES
MAX_EVENT_BYTES = 16 * 1024 * 1024  # one streamed event, or a line still without its end
MAX_ERROR_BYTES = 64 * 1024  # of an error body: its first words are all a message keeps
# JSON of more bytes is decoded on a thread: the event loop runs every task of the worker.
INLINE_DECODE_BYTES = 256 * 1024
EVENT_STREAM = "text/event-stream"


class MalformedReply(Exception):
    """Raised by a reply parser: a 2xx body lacks what the wire protocol promises."""


class StreamedError(Exception):
    """An error event in a stream that began with 200: the failure the same error would
    have been as a status, so that it is retried (or not) by the same rules."""

    def __init__(self, status: int, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.kind = kind  # one of the provider's documented error types, or "unknown"
        self.detail = detail[:MAX_DETAIL_CHARS]


class ReplyStream(Protocol):
    """Rebuilds, from a provider's stream events, the document its non-streamed reply
    is: one parser then reads both, so the two give the same `ModelReply`."""

    def take(self, event: ServerSentEvent) -> Sequence[ReplyDelta]:
        """Reads one event; the deltas it adds. Raises `MalformedReply`, `StreamedError`."""
        ...

    def document(self) -> dict[str, object]:
        """The whole reply; `MalformedReply` if the stream stopped before its end."""
        ...


_JSON = json.JSONDecoder()


def decode_event(event: ServerSentEvent) -> dict[str, object]:
    """An event's data as the JSON object every provider event is."""
    try:
        # Decoded as text first: `json.loads` of bytes first guesses their encoding.
        document = _JSON.decode(event.data.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError is one
        raise MalformedReply(f"a {event.event!r} event is not JSON") from None
    if not isinstance(document, dict):
        raise MalformedReply(f"a {event.event!r} event is not a JSON object")
    return document


def encode_json(value: object) -> bytes:
    """Compact UTF-8 JSON, object keys in insertion order: the same value, the same bytes.

    Lone surrogates (tool output decoded with `surrogateescape`) become U+FFFD: the APIs
    reject them even when escaped ("no low surrogate in string"), a 400 no retry can fix.
    """
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"the request has no exact JSON form: {exc}") from None
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # Surrogate pairs join into the character they encode; lone ones are replaced.
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
        return text.encode("utf-8")


def member(document: Mapping[str, object], key: str, kind: type[T]) -> T:
    """`document[key]`, which the protocol says is a `kind`, or `MalformedReply`."""
    value = document.get(key)
    # bool is an int to isinstance, but never a token count.
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise MalformedReply(f"{key!r} is missing or not of type {kind.__name__}")
    return value


def count(document: Mapping[str, object], key: str) -> int:
    """An optional token count: absent or null is 0 (compatible servers omit some)."""
    if document.get(key) is None:
        return 0
    value = member(document, key, int)
    if value < 0:
        raise MalformedReply(f"{key!r} is negative")
    return value


def check_base_url(base_url: str) -> str:
    try:
        url = httpx.URL(base_url)
    except httpx.InvalidURL as exc:
        raise ConfigError(f"base URL {base_url!r} is not a URL: {exc}") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ConfigError(f"base URL {base_url!r} must be an http:// or https:// URL")
    return base_url.rstrip("/")


class JsonEndpoint:
    """One provider URL; each `post` is exactly one HTTP attempt."""

    def __init__(
        self,
        provider: str,
        url: str,
        headers: Mapping[str, str],
        *,
        timeout_seconds: float,
        secret: str | None,
    ) -> None:
        if not timeout_seconds > 0:
            raise ConfigError(f"timeout_seconds must be positive, not {timeout_seconds!r}")
        self.provider = provider
        self.url = url
        self._secret = secret
        self._timeout_seconds = timeout_seconds
        # httpx never retries a request (its transport retries only connection setup, and
        # zero times by default), so noeta's retry policy is the only one. Its transport
        # reads through the chunk merger unless a proxy is set (HTTPS_PROXY and friends):
        # passing a transport would switch those off, so then httpx keeps its own.
        self._client = httpx.AsyncClient(
            headers=dict(headers),
            timeout=httpx.Timeout(timeout_seconds),
            follow_redirects=False,
            transport=merging_transport(url),
        )

    async def post(
        self,
        body: bytes,
        stream: Callable[[bool], ReplyStream],
        parse: Callable[[dict[str, object]], ModelReply],
        on_delta: OnDelta | None = None,
    ) -> ModelReply:
        try:
            async with self._client.stream("POST", self.url, content=body) as response:
                if not response.is_success:
                    content = await _read_at_most(response, MAX_ERROR_BYTES)
                    raise self._status_error(response, content or b"")
                if _media_type(response) == EVENT_STREAM:
                    # Told whether anyone listens: without a hook, no delta is even made.
                    reader = stream(on_delta is not None)
                    return await self._read_stream(response, reader, parse, on_delta)
                return await self._read_body(response, parse)
        except httpx.UnsupportedProtocol as exc:
            raise self._error(f"cannot send to {self.url}: {exc}", retryable=False) from None
        except httpx.TimeoutException as exc:
            kind = type(exc).__name__
            message = f"no reply within {self._timeout_seconds:g} s ({kind})"
            raise self._error(message, retryable=True, reason=f"timeout ({kind})") from None
        except httpx.RequestError as exc:
            # Refused, reset or dropped before a full reply: the request may or may not have
            # reached the model, and sending it again is safe.
            kind = type(exc).__name__
            message = f"connection failed ({kind}: {exc})"
            raise self._error(
                message, retryable=True, reason=f"connection failed ({kind})"
            ) from None

    async def _read_stream(
        self,
        response: httpx.Response,
        stream: ReplyStream,
        parse: Callable[[dict[str, object]], ModelReply],
        on_delta: OnDelta | None,
    ) -> ModelReply:
        decoder = EventStreamDecoder(MAX_EVENT_BYTES)
        received = 0
        try:
            async for chunk in response.aiter_bytes():
                received += len(chunk)
                if received > MAX_REPLY_BYTES:
                    raise self._too_large(response)
                for event in decoder.feed(chunk):
                    if len(event.data) <= INLINE_DECODE_BYTES:
                        deltas = stream.take(event)
                    else:
                        deltas = await asyncio.to_thread(stream.take, event)
                    if on_delta is not None:
                        for delta in deltas:
                            on_delta(delta)
            if decoder.mid_event:
                raise MalformedReply("the stream stopped in the middle of an event")
            if received <= INLINE_DECODE_BYTES:
                return parse(stream.document())
            # Joining the text and parsing the tool inputs of a long reply takes a while.
            return await asyncio.to_thread(lambda: parse(stream.document()))
        except (MalformedReply, EventStreamError) as exc:
            raise self._malformed(str(exc), response) from None
        except StreamedError as error:
            raise self._streamed_error(error, response) from None

    async def _read_body(
        self, response: httpx.Response, parse: Callable[[dict[str, object]], ModelReply]
    ) -> ModelReply:
        """A server that answers a stream request with one JSON document (some compatible
        ones, and a proxy's own answers) is read as it would have been before streaming."""
        content = await _read_at_most(response, MAX_REPLY_BYTES)
        if content is None:
            raise self._too_large(response)
        try:
            if len(content) <= INLINE_DECODE_BYTES:
                return _parse_body(content, parse)
            return await asyncio.to_thread(_parse_body, content, parse)
        except MalformedReply as exc:
            raise self._malformed(str(exc), response) from None

    async def close(self) -> None:
        await self._client.aclose()

    def _too_large(self, response: httpx.Response) -> ProviderError:
        # Not retried: the same request would most likely be answered at the same length.
        message = f"the reply is over {MAX_REPLY_BYTES:,} bytes{_request_id(response)}"
        status = response.status_code
        return self._error(message, retryable=False, status=status, reason="reply too large")

    def _streamed_error(self, error: StreamedError, response: httpx.Response) -> ProviderError:
        message = f"error event: {error.detail}{_request_id(response)}"
        return self._error(
            message,
            retryable=_is_retryable(error.status, httpx.Headers()),
            status=error.status,
            reason=f"error event ({error.kind})",
        )

    def _status_error(self, response: httpx.Response, content: bytes) -> ProviderError:
        status = response.status_code
        detail = _error_detail(content) or response.reason_phrase
        message = f"HTTP {status} {detail}{_request_id(response)}"
        return self._error(
            message,
            retryable=_is_retryable(status, response.headers),
            status=status,
            retry_after=retry_after(response.headers),
        )

    def _malformed(self, what: str, response: httpx.Response) -> ProviderError:
        # A reply cut short or garbled in transit usually comes out whole the next time.
        message = f"malformed reply: {what}{_request_id(response)}"
        reason = f"malformed reply (HTTP {response.status_code})"
        return self._error(message, retryable=True, status=response.status_code, reason=reason)

    def _error(
        self,
        message: str,
        *,
        retryable: bool,
        status: int | None = None,
        retry_after: float | None = None,
        reason: str = "",
    ) -> ProviderError:
        if self._secret:
            message = message.replace(self._secret, "[redacted]")
        return ProviderError(
            f"{self.provider}: {message}",
            retryable=retryable,
            status=status,
            retry_after=retry_after,
            reason=reason,
        )


def retry_after(headers: httpx.Headers) -> float | None:
    """Seconds the server asks us to wait: `retry-after-ms`, or `retry-after` in seconds
    or as an HTTP date. None when absent or unreadable."""
    milliseconds = _seconds(headers.get("retry-after-ms"))
    if milliseconds is not None:
        return milliseconds / 1000
    value = headers.get("retry-after")
    seconds = _seconds(value)
    if seconds is not None or value is None:
        return seconds
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:  # "-0000": UTC, by RFC 5322
        moment = moment.replace(tzinfo=datetime.UTC)
    return max(0.0, moment.timestamp() - time.time())


def _seconds(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


async def _read_at_most(response: httpx.Response, limit: int) -> bytes | None:
    """The body, or None once it is over `limit` bytes (the rest is never read)."""
    parts: list[bytes] = []
    received = 0
    async for chunk in response.aiter_bytes():
        received += len(chunk)
        if received > limit:
            return None
        parts.append(chunk)
    return b"".join(parts)


def _parse_body(content: bytes, parse: Callable[[dict[str, object]], ModelReply]) -> ModelReply:
    try:
        document = json.loads(content)
    except ValueError:
        raise MalformedReply("the body is not JSON") from None
    if not isinstance(document, dict):
        raise MalformedReply("the body is not a JSON object")
    return parse(document)


def _media_type(response: httpx.Response) -> str:
    value: str = response.headers.get("content-type", "")
    return value.partition(";")[0].strip().lower()


def _is_retryable(status: int, headers: httpx.Headers) -> bool:
    # Both providers send x-should-retry to overrule the status; their SDKs obey it.
    verdict: str | None = headers.get("x-should-retry")
    if verdict in ("true", "false"):
        return verdict == "true"
    # 409 is a lock conflict at OpenAI; 529 (Anthropic "overloaded") is >= 500.
    return status in (408, 409, 429) or status >= 500


def _error_detail(content: bytes) -> str:
    """The provider's error type and message, from any of the shapes compatible servers use."""
    try:
        document = json.loads(content)
    except ValueError:
        return ""  # an HTML page from a proxy: the status line says enough
    if not isinstance(document, dict):
        return ""
    error = document.get("error")
    if isinstance(error, str):  # Ollama: {"error": "model not found"}
        return error[:MAX_DETAIL_CHARS]
    source = error if isinstance(error, dict) else document
    parts = [source.get("type"), source.get("message")]
    detail = ": ".join(part for part in parts if isinstance(part, str) and part)
    return detail[:MAX_DETAIL_CHARS]


def _request_id(response: httpx.Response) -> str:
    """The id to quote to the provider's support, when it sent one."""
    value = response.headers.get("request-id") or response.headers.get("x-request-id")
    return f" (request id {value[:100]})" if value else ""
