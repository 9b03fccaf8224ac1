"""The HTTP side of the provider fakes: the scripted responses, the recorded requests, and
a threaded local server that answers each request as its fake (`fake_providers`) renders it.
"""

from __future__ import annotations

import json
import socket
import ssl
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal, Self, cast

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
    piece_chars: int | None = None  # streamed in pieces of this many characters, not uneven
    # Streamed: after this many events the server sets `paused` and waits for `resume`.
    pause_after: int | None = None


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
class RawStream:
    parts: tuple[bytes, ...]
    end: Literal["done", "drop", "stall"] = "done"


@dataclass(frozen=True, slots=True)
class Drop:
    pass


@dataclass(frozen=True, slots=True)
class Stall:
    pass


Response = Reply | HttpError | RawBody | RawStream | Drop | Stall


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    method: str
    path: str
    headers: Mapping[str, str]  # names in lower case
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class FakeServer:
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
        self.chunk_bytes: int | None = None
        self.first_bytes: list[float] = []
        self.tls: ssl.SSLContext | None = None  # set before entering: served over TLS
        self.part_seconds = 0.0  # a pause between a stream's writes: a model's pace
        self.paused = threading.Event()  # a stream with `pause_after` reached its pause
        self.resume = threading.Event()  # set by the test: the paused stream goes on
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
        if self.tls is not None:
            self._server.socket = self.tls.wrap_socket(self._server.socket, server_side=True)
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
        scheme = "http" if self.tls is None else "https"
        return f"{scheme}://127.0.0.1:{self._server.server_port}{self.prefix}"

    def reset(self) -> None:
        """As new, for the next test of a module that shares one server."""
        with self._lock:
            self._queue.clear()
            self.requests.clear()
            self.arrivals.clear()
            self.first_bytes.clear()
            self.chunk_bytes = None
            self.part_seconds = 0.0
            self.paused.clear()
            self.resume.clear()
            self._per_second = 0.0
            self._answered = 0

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

    def stream_of(self, reply: Reply, model: str = "fake-model", number: int = 1) -> list[bytes]:
        """The events that stream `reply`, each whole."""
        raise NotImplementedError

    def error_event(self, status: int) -> bytes:
        """The event that reports, mid-stream, the error answered with `status` otherwise."""
        raise NotImplementedError

    def render_error(self, status: int, request: RecordedRequest) -> dict[str, object]:
        raise NotImplementedError

    def refusal(self, request: RecordedRequest) -> dict[str, object] | None:
        """The 400 body the real API answers this request with, if it refuses it."""
        return None


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a kept-alive connection must not hold up server_close
    fake: FakeServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up (a reply over its bound, a timeout) is no server error.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real APIs: a drop can hit a reused socket

    def setup(self) -> None:
        super().setup()
        # Each event is its own small write, as the APIs flush them: without this, Nagle
        # holds the second one until the client's delayed acknowledgement (40 ms).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

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
                model, streamed = _requested(body)
                # Billed before it is sent, as a provider bills what it answered: recorded
                # after, a client that read the reply could look before the record was there.
                fake.record_billed(model, response)
                if streamed:
                    parts = fake.stream_of(response, model, number)
                    self._stream(fake, parts, "done", number, response.pause_after)
                else:
                    reply = _encode(fake.render_reply(response, model, number))
                    self._send(fake, 200, reply, {}, number)
            case RawStream(parts=parts, end=end):
                self._stream(fake, parts, end, number)
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
        fake: FakeServer,
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

    def _stream(
        self,
        fake: FakeServer,
        parts: Sequence[bytes],
        end: str,
        number: int,
        pause_after: int | None = None,
    ) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.send_header(fake.request_id_header, f"req_fake_{number}")
        self.end_headers()
        try:
            for index, part in enumerate(cut(parts, fake.chunk_bytes)):
                if index and fake.part_seconds:
                    time.sleep(fake.part_seconds)
                if index == pause_after:
                    fake.paused.set()
                    while not (fake.resume.wait(0.05) or fake._stopping.is_set()):
                        pass
                if index == 0:
                    fake.first_bytes.append(time.monotonic())
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                self.wfile.flush()
            if end == "done":
                self.wfile.write(b"0\r\n\r\n")
                return
        except (BrokenPipeError, ConnectionResetError):
            # The client stopped reading (a reply over its bound): as a real server, go on.
            self.close_connection = True
            return
        if end == "stall":
            fake.wait_until_stopped()
        self.close_connection = True  # without the last chunk: a body cut short

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the test's own output says what went wrong


def _encode(document: dict[str, object]) -> bytes:
    return json.dumps(document).encode("utf-8")


def _requested(body: bytes) -> tuple[str, bool]:
    """The model the request names, and whether it asks for a stream."""
    try:
        document = json.loads(body)
    except ValueError:
        return "fake-model", False
    if not isinstance(document, dict):
        return "fake-model", False
    model = document.get("model")
    return (model if isinstance(model, str) else "fake-model"), document.get("stream") is True


def cut(parts: Sequence[bytes], every: int | None) -> list[bytes]:
    """The parts as written: whole, or re-cut into `every` bytes each, ignoring where
    lines and characters end."""
    if not every:
        return list(parts)
    joined = b"".join(parts)
    return [joined[start : start + every] for start in range(0, len(joined), every)]
