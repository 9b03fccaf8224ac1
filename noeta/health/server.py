"""The health server (`--health HOST:PORT`): GET /livez, /readyz and /metrics.

It runs in threads of its own, not on the process's event loop: /livez must answer while
that loop is blocked (that is what it reports), and a slow or idle client holds only its
own thread, whose reads time out (REQUEST_SECONDS); at most MAX_CONNECTIONS are served
at once, the rest are closed unanswered. Readiness and the metrics' store readings run
only when asked, each bounded by a timeout.
"""

from __future__ import annotations

import errno
import json
import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from noeta.core.errors import ConfigError
from noeta.health.liveness import Liveness
from noeta.health.readiness import Readiness

log = logging.getLogger("noeta.health")

DEFAULT_HOST = "127.0.0.1"
REQUEST_SECONDS = 5.0  # a client's request must arrive, and its answer leave, within this
MAX_CONNECTIONS = 16
JSON = "application/json"


@dataclass(frozen=True, slots=True)
class ListenAddress:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def reachable_host(self) -> str:
        """Where a client on this machine connects: a wildcard host means loopback."""
        return {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(self.host, self.host)


def parse_address(text: str) -> ListenAddress:
    """`HOST:PORT`, `[V6]:PORT`, `:PORT` or `PORT` (both: loopback)."""
    host, colon, port_text = text.strip().rpartition(":")
    if not colon:
        host, port_text = "", text.strip()
    host = host.removeprefix("[").removesuffix("]") or DEFAULT_HOST
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535 or not host.strip():
        raise ConfigError(f"--health takes HOST:PORT (e.g. 127.0.0.1:9464), not {text!r}")
    return ListenAddress(host, int(port_text))


def listen(address: ListenAddress, option: str = "--health") -> socket.socket:
    """The listening socket, made before anything starts: a taken address is one line
    (`noeta web --bind` makes its own here too, with no `option` named)."""
    said = f"{option}: " if option else ""
    try:
        family = socket.getaddrinfo(address.host, address.port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror as error:
        raise ConfigError(f"{said}cannot listen on {address}: {error.strerror}") from None
    listening = socket.socket(family, socket.SOCK_STREAM)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listening.bind((address.host, address.port))
        listening.listen(128)
    except OSError as error:
        listening.close()
        why = "the address is in use" if error.errno == errno.EADDRINUSE else error.strerror
        raise ConfigError(f"{said}cannot listen on {address}: {why}") from None
    return listening


class HealthServer(ThreadingHTTPServer):
    """Serves the endpoints from `listening`; `start` runs it in a daemon thread."""

    daemon_threads = True

    def __init__(
        self,
        listening: socket.socket,
        liveness: Liveness,
        readiness: Readiness,
        metrics_text: Callable[[], tuple[bytes, str]] | None = None,
    ) -> None:
        super().__init__(listening.getsockname()[:2], _Handler, bind_and_activate=False)
        self.socket.close()
        self.socket = listening
        self.server_address = listening.getsockname()[:2]
        self.liveness = liveness
        self.readiness = readiness
        self.metrics_text = metrics_text
        self._connections = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self.serve_forever, name="noeta-health", daemon=True)
        self._thread.start()

    def close(self) -> None:
        if self._thread is not None:
            self.shutdown()
        self.server_close()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._connections.acquire(blocking=False):
            self.shutdown_request(request)  # too many at once: closed, not queued
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._connections.release()


class _Handler(BaseHTTPRequestHandler):
    server: HealthServer
    timeout = REQUEST_SECONDS  # the socket's: a client that sends nothing is dropped
    protocol_version = "HTTP/1.0"  # one request a connection: no idle keep-alive

    def do_GET(self) -> None:
        path = self.path.partition("?")[0]
        if path == "/livez":
            states = self.server.liveness.states()
            stuck = [state.name for state in states if state.stuck]
            loops = [
                {
                    "loop": state.name,
                    "last_turn": state.last_turn.isoformat(timespec="milliseconds"),
                    "seconds_ago": round(state.seconds_ago, 3),
                    "stuck": state.stuck,
                }
                for state in states
            ]
            self._json(503 if stuck else 200, {"live": not stuck, "stuck": stuck, "loops": loops})
        elif path == "/readyz":
            reasons = self.server.readiness.reasons()
            self._json(503 if reasons else 200, {"ready": not reasons, "reasons": reasons})
        elif path == "/metrics" and self.server.metrics_text is not None:
            body, content_type = self.server.metrics_text()
            self._send(200, body, content_type)
        else:
            self._send(404, b"not found: /livez, /readyz, /metrics\n", "text/plain")

    def _json(self, status: int, body: dict[str, object]) -> None:
        self._send(status, json.dumps(body).encode() + b"\n", JSON)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("health: " + format, *args)
