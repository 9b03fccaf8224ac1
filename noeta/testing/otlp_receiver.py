"""A local OTLP/HTTP receiver, the path Jaeger and collectors take: it decodes what
exporters send (protobuf, optionally gzip) with opentelemetry-proto and keeps it.

    with OtlpReceiver() as receiver:  # receiver.endpoint for OTEL_EXPORTER_OTLP_ENDPOINT
        ...
        receiver.spans()       # every span received, decoded; receiver.bodies: raw bytes
"""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str  # hex
    span_id: str
    parent_span_id: str  # "" for a root span
    attributes: dict[str, Any]
    links: tuple[tuple[str, str], ...]  # (trace id, span id)
    status_code: int  # 0 unset, 1 ok, 2 error
    status_message: str
    events: tuple[tuple[str, dict[str, Any]], ...]
    start_ns: int
    end_ns: int
    service: str = ""


@dataclass
class _Received:
    spans: list[ReceivedSpan] = field(default_factory=list)
    metric_names: set[str] = field(default_factory=set)
    bodies: list[bytes] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        received = self.server.received
        with received.lock:
            received.bodies.append(body)
        if self.path == "/v1/traces":
            request = ExportTraceServiceRequest.FromString(body)
            spans = list(_spans(request))
            with received.lock:
                received.spans.extend(spans)
            reply = ExportTraceServiceResponse().SerializeToString()
        elif self.path == "/v1/metrics":
            metrics = ExportMetricsServiceRequest.FromString(body)
            names = {
                metric.name
                for resource in metrics.resource_metrics
                for scope in resource.scope_metrics
                for metric in scope.metrics
            }
            with received.lock:
                received.metric_names |= names
            reply = ExportMetricsServiceResponse().SerializeToString()
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _spans(request: ExportTraceServiceRequest) -> Any:
    for resource_spans in request.resource_spans:
        service = _attributes(resource_spans.resource.attributes).get("service.name", "")
        for scope in resource_spans.scope_spans:
            for span in scope.spans:
                yield ReceivedSpan(
                    name=span.name,
                    trace_id=span.trace_id.hex(),
                    span_id=span.span_id.hex(),
                    parent_span_id=span.parent_span_id.hex(),
                    attributes=_attributes(span.attributes),
                    links=tuple((link.trace_id.hex(), link.span_id.hex()) for link in span.links),
                    status_code=span.status.code,
                    status_message=span.status.message,
                    events=tuple((e.name, _attributes(e.attributes)) for e in span.events),
                    start_ns=span.start_time_unix_nano,
                    end_ns=span.end_time_unix_nano,
                    service=str(service),
                )


class _Server(ThreadingHTTPServer):
    received: _Received


class OtlpReceiver:
    def __init__(self) -> None:
        self.received = _Received()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.received = self.received
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def spans(self) -> list[ReceivedSpan]:
        with self.received.lock:
            return list(self.received.spans)

    def metric_names(self) -> set[str]:
        with self.received.lock:
            return set(self.received.metric_names)

    def bodies(self) -> list[bytes]:
        with self.received.lock:
            return list(self.received.bodies)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
