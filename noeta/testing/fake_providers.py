"""Local HTTP servers that speak the Anthropic Messages and OpenAI Chat Completions wire
protocols, so provider adapters are tested over real HTTP without leaving 127.0.0.1.

    with FakeAnthropic() as server:  # or FakeOpenAI(); base_url ends in /v1 for OpenAI
        server.script(HttpError(429, retry_after="2"), Reply(text="hi", input_tokens=7))
        provider = AnthropicProvider("key", base_url=server.base_url)
        ...
        server.requests[0].body         # the raw bytes; .json() decodes, .headers by name

Each request takes the next scripted response, or `Reply()` when none is queued:

- `Reply(text, tool_calls, stop_reason, input_tokens, output_tokens, cache_read_tokens,
  cache_write_tokens, reasoning_tokens, with_usage)`: a normal answer. `text=None` sends
  no text; `stop_reason` is the wire value and defaults to the tool-use or end-of-turn
  one. Token counts mean what noeta's `Usage` means: `input_tokens` excludes the cached
  ones; each is sent in the fields the real API uses. `server.billed` holds each reply
  sent, with the model asked for, in order: what the provider would bill.
- `HttpError(status, retry_after=None, body=None, headers={})`: an error status; the body
  defaults to the provider's error JSON (FakeOpenAI's 401 quotes the key, as OpenAI does).
- `RawBody(body, status=200)`: any bytes, e.g. truncated or non-JSON or empty.
- `Drop()`: close the connection without answering.
- `Stall()`: answer nothing until the server stops, so the client times out.

`server.limit_rate(10, retry_after="1")` makes it a rate-limited provider: a token bucket
of 10 requests refilled at 10 a second; a request finding it empty is answered 429 with
that Retry-After (before any scripted response). `server.arrivals` holds each request's
arrival (time.monotonic()) and the status it was answered, in order.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self, cast

from noeta.core.ports.model import ToolCall


@dataclass(frozen=True, slots=True)
class Reply:
    text: str | None = "Hello from the fake model."
    tool_calls: tuple[ToolCall, ...] = ()
    stop_reason: str | None = None
    input_tokens: int = 10
    output_tokens: int = 5
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0  # Anthropic only: OpenAI does not report cache writes
    reasoning_tokens: int = 0  # OpenAI only, part of output_tokens (Anthropic folds it in)
    with_usage: bool = True  # False: the reply has no usage object (some servers omit it)


@dataclass(frozen=True, slots=True)
class HttpError:
    status: int
    retry_after: str | None = None
    body: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RawBody:
    body: bytes
    status: int = 200


@dataclass(frozen=True, slots=True)
class Drop:
    pass


@dataclass(frozen=True, slots=True)
class Stall:
    pass


Response = Reply | HttpError | RawBody | Drop | Stall


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    method: str
    path: str
    headers: Mapping[str, str]  # names in lower case
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class _FakeServer:
    path = ""  # the one path answered; any other gets a 404
    prefix = ""  # of base_url, as the provider's client expects it
    request_id_header = "x-request-id"

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self._queue: deque[Response] = deque()
        self._lock = threading.Lock()
        self._answered = 0
        self._stopping = threading.Event()
        self._server: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.arrivals: list[tuple[float, int]] = []
        self.billed: list[tuple[str, Reply]] = []  # (model, reply) of each reply sent
        self._per_second = 0.0
        self._retry_after = ""
        self._bucket = 0.0
        self._filled_at = 0.0

    def limit_rate(self, per_second: int, retry_after: str = "1") -> None:
        with self._lock:
            self._per_second, self._retry_after = float(per_second), retry_after
            self._bucket, self._filled_at = float(per_second), time.monotonic()

    def over_rate(self) -> Response | None:
        """The 429 this request gets from the rate limit, if it is over; records it."""
        with self._lock:
            now = time.monotonic()
            refused = False
            if self._per_second:
                elapsed = now - self._filled_at
                self._bucket = min(self._per_second, self._bucket + elapsed * self._per_second)
                self._filled_at = now
                refused = self._bucket < 1
                if not refused:
                    self._bucket -= 1
            self.arrivals.append((now, 429 if refused else 200))
            return HttpError(429, retry_after=self._retry_after) if refused else None

    def __enter__(self) -> Self:
        self._server = _HTTPServer(("127.0.0.1", 0), _Handler)
        self._server.fake = self
        # A short poll so that stopping the server does not add half a second to each test.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stopping.set()  # releases stalled requests
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("the fake server is not running: use it in a with block")
        return f"http://127.0.0.1:{self._server.server_port}{self.prefix}"

    def script(self, *responses: Response) -> None:
        with self._lock:
            self._queue.extend(responses)

    def next_response(self) -> tuple[Response, int]:
        with self._lock:
            self._answered += 1
            return (self._queue.popleft() if self._queue else Reply()), self._answered

    def record_billed(self, model: str, reply: Reply) -> None:
        with self._lock:
            self.billed.append((model, reply))

    def wait_until_stopped(self) -> None:
        self._stopping.wait()

    def render_reply(self, reply: Reply, model: str, number: int) -> dict[str, object]:
        raise NotImplementedError

    def render_error(self, status: int, request: RecordedRequest) -> dict[str, object]:
        raise NotImplementedError

    def refusal(self, request: RecordedRequest) -> dict[str, object] | None:
        """The 400 body the real API answers this request with, if it refuses it."""
        return None


class FakeAnthropic(_FakeServer):
    path = "/v1/messages"
    request_id_header = "request-id"

    def render_reply(self, reply: Reply, model: str, number: int) -> dict[str, object]:
        content: list[dict[str, object]] = []
        if reply.text is not None:
            content.append({"type": "text", "text": reply.text})
        for call in reply.tool_calls:
            content.append(
                {"type": "tool_use", "id": call.id, "name": call.name, "input": call.input}
            )
        default_stop = "tool_use" if reply.tool_calls else "end_turn"
        document: dict[str, object] = {
            "id": f"msg_fake_{number}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": reply.stop_reason or default_stop,
            "stop_sequence": None,
            "usage": {
                "input_tokens": reply.input_tokens,
                "cache_creation_input_tokens": reply.cache_write_tokens,
                "cache_read_input_tokens": reply.cache_read_tokens,
                "output_tokens": reply.output_tokens,
            },
        }
        return _with_usage(document, reply)

    def render_error(self, status: int, request: RecordedRequest) -> dict[str, object]:
        kind = _ANTHROPIC_ERROR_TYPES.get(status, "api_error")
        message = f"fake {kind.replace('_', ' ')}"
        return {"type": "error", "error": {"type": kind, "message": message}}

    def refusal(self, request: RecordedRequest) -> dict[str, object] | None:
        try:
            messages = request.json().get("messages") or []
        except (ValueError, AttributeError):
            return None
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            for block in content if isinstance(content, list) else []:
                text = block.get("text") if isinstance(block, dict) else None
                if block.get("type") == "text" and isinstance(text, str) and not text.strip():
                    reason = "messages: text content blocks must contain non-whitespace text"
                    return {
                        "type": "error",
                        "error": {"type": "invalid_request_error", "message": reason},
                    }
        return None


_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


class FakeOpenAI(_FakeServer):
    path = "/v1/chat/completions"
    prefix = "/v1"

    def render_reply(self, reply: Reply, model: str, number: int) -> dict[str, object]:
        message: dict[str, object] = {"role": "assistant", "content": reply.text, "refusal": None}
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(call.input)},
                }
                for call in reply.tool_calls
            ]
        default_stop = "tool_calls" if reply.tool_calls else "stop"
        prompt_tokens = reply.input_tokens + reply.cache_read_tokens
        document: dict[str, object] = {
            "id": f"chatcmpl-fake-{number}",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": reply.stop_reason or default_stop,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": reply.output_tokens,
                "total_tokens": prompt_tokens + reply.output_tokens,
                "prompt_tokens_details": {"cached_tokens": reply.cache_read_tokens},
                "completion_tokens_details": {"reasoning_tokens": reply.reasoning_tokens},
            },
        }
        return _with_usage(document, reply)

    def render_error(self, status: int, request: RecordedRequest) -> dict[str, object]:
        default_kind = "server_error" if status >= 500 else "invalid_request_error"
        kind, code = _OPENAI_ERROR_TYPES.get(status, (default_kind, None))
        message = f"fake {kind.replace('_', ' ')}"
        if status == 401:
            # OpenAI quotes the key it refused (partly masked); quoting all of it tests that
            # adapters keep keys out of their errors.
            key = request.headers.get("authorization", "").removeprefix("Bearer ")
            message = f"Incorrect API key provided: {key}."
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}

    def refusal(self, request: RecordedRequest) -> dict[str, object] | None:
        try:
            document = request.json()
        except ValueError:
            return None
        model = document.get("model") if isinstance(document, dict) else None
        if isinstance(model, str) and "max_tokens" in document and _REASONING.match(model):
            reason = (
                "Unsupported parameter: 'max_tokens' is not supported with this model. "
                "Use 'max_completion_tokens' instead."
            )
            error = {"message": reason, "type": "invalid_request_error", "param": "max_tokens"}
            return {"error": {**error, "code": "unsupported_parameter"}}
        return None


# The models OpenAI documents as reasoning models (o-series, gpt-5 family).
_REASONING = re.compile(r"(o\d|gpt-5)(\b|[-.])")

_OPENAI_ERROR_TYPES: dict[int, tuple[str, str | None]] = {
    401: ("invalid_request_error", "invalid_api_key"),
    429: ("requests", "rate_limit_exceeded"),
}


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a kept-alive connection must not hold up server_close
    fake: _FakeServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real APIs: a drop can hit a reused socket

    def do_POST(self) -> None:
        fake = cast(_HTTPServer, self.server).fake
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        headers = {name.lower(): value for name, value in self.headers.items()}
        request = RecordedRequest("POST", self.path, headers, body)
        fake.requests.append(request)
        if self.path != fake.path:
            self._send(fake, 404, _encode(fake.render_error(404, request)))
            return
        refused = fake.refusal(request)
        if refused is not None:
            self._send(fake, 400, _encode(refused))
            return
        throttled = fake.over_rate()
        response, number = (throttled, 0) if throttled else fake.next_response()
        match response:
            case Reply():
                model = _requested_model(body)
                reply = _encode(fake.render_reply(response, model, number))
                self._send(fake, 200, reply, {}, number)
                fake.record_billed(model, response)
            case HttpError(status=status, retry_after=retry_after, body=error_body):
                extra = dict(response.headers)
                if retry_after is not None:
                    extra["retry-after"] = retry_after
                if error_body is None:
                    error_body = _encode(fake.render_error(status, request))
                self._send(fake, status, error_body, extra, number)
            case RawBody(body=raw, status=status):
                self._send(fake, status, raw, {}, number)
            case Drop():
                self.close_connection = True
            case Stall():
                fake.wait_until_stopped()
                self.close_connection = True

    def _send(
        self,
        fake: _FakeServer,
        status: int,
        body: bytes,
        extra: Mapping[str, str] | None = None,
        number: int = 0,
    ) -> None:
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.send_header(fake.request_id_header, f"req_fake_{number}")
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the test's own output says what went wrong


def _with_usage(document: dict[str, object], reply: Reply) -> dict[str, object]:
    if not reply.with_usage:
        del document["usage"]
    return document


def _encode(document: dict[str, object]) -> bytes:
    return json.dumps(document).encode("utf-8")


def _requested_model(body: bytes) -> str:
    try:
        model = json.loads(body).get("model")
    except (ValueError, AttributeError):
        return "fake-model"
    return model if isinstance(model, str) else "fake-model"
