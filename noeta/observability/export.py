"""Starting and stopping export: the standard OTEL_* variables decide whether traces and
metrics leave the process; only then is opentelemetry imported (ADR-0024)."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from noeta.observability import names, tracing

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

_TRACES_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_METRICS_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
SHUTDOWN_SECONDS = 2.0  # at exit, for everything still queued


def _wanted(endpoints: Sequence[str], exporter_env: str) -> bool:
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get(exporter_env, "").strip().lower()
    if exporter == "none":
        return False
    return exporter == "console" or any(env.get(name) for name in endpoints)


def traces_wanted() -> bool:
    """OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set (or OTEL_TRACES_EXPORTER=console)."""
    return _wanted(_TRACES_ENDPOINTS, "OTEL_TRACES_EXPORTER")


def metrics_wanted() -> bool:
    """OTEL_EXPORTER_OTLP_(METRICS_)ENDPOINT is set (or OTEL_METRICS_EXPORTER=console)."""
    return _wanted(_METRICS_ENDPOINTS, "OTEL_METRICS_EXPORTER")


def start(service_name: str, secrets: Iterable[str | None] = (), *, scraped: bool = False) -> None:
    """Start exporting traces and metrics if the standard OTEL_* variables ask for it,
    and recording metrics for a Prometheus scrape if `scraped` (`--health`).

    Nothing is imported, and nothing costs anything, when neither asks. Either way the
    process's secrets (its environment's, and `secrets`) are kept out of every span.
    """
    tracing.add_environment_secrets()
    tracing.add_secrets(secrets)
    if traces_wanted() or metrics_wanted():
        _complaints.install()
    if traces_wanted():
        from opentelemetry import trace
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

        exporter: Any
        if os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "console":
            exporter = ConsoleSpanExporter(out=sys.stderr)  # stdout is the command's answer
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()  # OTEL_EXPORTER_OTLP_* say where and how
        # The batch delay is OTEL_BSP_SCHEDULE_DELAY (5 s by default): a process killed
        # sooner loses what is queued; the next claimer accounts for the step it cut short.
        provider = make_provider(service_name, [BatchSpanProcessor(exporter)])
        trace.set_tracer_provider(provider)
        install(provider)
    if metrics_wanted() or scraped:
        from noeta.observability import instruments

        pulled = []
        if scraped:
            from noeta.observability import prometheus

            pulled.append(prometheus.pull_reader())
        instruments.start(service_name, push=metrics_wanted(), pulled=pulled)


def shutdown(limit_seconds: float = SHUTDOWN_SECONDS) -> None:
    """Export what is queued (at a clean exit; a killed process loses it), for at most
    `limit_seconds`: an endpoint that does not answer costs that and one line on stderr."""
    if _complaints.installed is None:
        tracing.shutdown()
        return
    exporting = threading.Thread(target=tracing.shutdown, name="noeta-export", daemon=True)
    exporting.start()
    exporting.join(limit_seconds)
    if exporting.is_alive() and not _complaints.said:
        _complaints.say(
            f"the exporter did not finish within {limit_seconds:g} s "
            f"(is {_endpoint()} reachable?); what was queued is dropped"
        )
    if not exporting.is_alive():
        _complaints.uninstall()  # else kept: the export still retries until the process exits


def _endpoint() -> str:
    env = os.environ
    names = (*_TRACES_ENDPOINTS, *_METRICS_ENDPOINTS)
    return next((env[name] for name in names if env.get(name)), "its endpoint")


class _ExportComplaints(logging.Handler):
    """The exporters log a line for every retry of every batch; this says the first
    failure once on stderr (scrubbed), then stays quiet for a minute."""

    QUIET_SECONDS = 60.0

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.installed: logging.Logger | None = None
        self.said = False
        self._last = float("-inf")

    def install(self) -> None:
        if self.installed is None:
            self.installed = logging.getLogger("opentelemetry")
            self.installed.addHandler(self)
            self.installed.propagate = False

    def uninstall(self) -> None:
        if self.installed is not None:
            self.installed.removeHandler(self)
            self.installed.propagate = True
            self.installed, self.said = None, False

    def emit(self, record: logging.LogRecord) -> None:
        now = time.monotonic()
        if now - self._last >= self.QUIET_SECONDS:
            self._last = now
            self.say(" ".join(record.getMessage().split())[:300])

    def say(self, message: str) -> None:
        self.said = True
        print(f"noeta: telemetry not exported: {tracing.scrub(message)}", file=sys.stderr)


_complaints = _ExportComplaints()


def make_provider(service_name: str, processors: Sequence[SpanProcessor]) -> TracerProvider:
    """A tracer provider with noeta's id generator (a recovered span keeps its ids)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    from noeta.observability.takeover import RecoveringIdGenerator

    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": service_name}
    provider = TracerProvider(
        resource=Resource.create(attributes),
        id_generator=RecoveringIdGenerator(),
        shutdown_on_exit=False,  # export.shutdown bounds the one at exit
    )
    for processor in processors:
        provider.add_span_processor(processor)
    return provider


def install(provider: TracerProvider, *, capture_content: bool | None = None) -> None:
    """Trace with `provider` from now on (`start` does this; tests pass their own)."""
    from noeta.observability.spans import LiveTracing

    if capture_content is None:
        wanted = os.environ.get(names.CAPTURE_CONTENT_ENV, "").strip().lower()
        capture_content = wanted == "true"
    tracing.switch_on(LiveTracing(provider, capture_content))
