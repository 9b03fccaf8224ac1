"""Metrics over OTLP: claims, conflicts, commit-unknowns, takeovers, lost background jobs,
model and tool call durations and errors, queue depth.

Every function is a no-op until `setup` (OTEL_* variables ask for export) or a test's
`install`; opentelemetry is imported only then. Errors are counted on the duration
histograms: each failed call carries `error.type`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader

# Seconds between the worker's queue-depth readings (one cheap statement each).
QUEUE_DEPTH_SECONDS = 15.0


class _Instruments:
    def __init__(self, provider: MeterProvider) -> None:
        from opentelemetry.metrics import CallbackOptions, Observation

        self.provider = provider
        meter = provider.get_meter("noeta")
        self.claims = meter.create_counter("noeta.claims", "{claim}", "Tasks claimed")
        self.takeovers = meter.create_counter(
            "noeta.takeovers", "{claim}", "Claims that took a task whose lease had lapsed"
        )
        self.conflicts = meter.create_counter(
            "noeta.conflicts", "{append}", "Appends refused: the claim had passed on"
        )
        self.commit_unknowns = meter.create_counter(
            "noeta.commit_unknowns", "{write}", "Writes whose outcome is unknown"
        )
        self.jobs_lost = meter.create_counter(
            "noeta.jobs.lost", "{job}", "Background jobs recorded lost with their worker"
        )
        self.model_duration = meter.create_histogram(
            "gen_ai.client.operation.duration", "s", "Model calls, retries included"
        )
        self.token_usage = meter.create_histogram(
            "gen_ai.client.token.usage", "{token}", "Tokens per model call"
        )
        self.tool_duration = meter.create_histogram(
            "noeta.tool.duration", "s", "Tool calls (execute_tool)"
        )
        self.depth: dict[str, int] = {}

        def observe(options: CallbackOptions) -> list[Observation]:
            return [Observation(n, {"noeta.queue": q}) for q, n in self.depth.items()]

        meter.create_observable_gauge(
            "noeta.queue.depth", [observe], "{task}", "Tasks claimable now, per queue"
        )


class _Switch:
    instruments: _Instruments | None = None  # set while metrics are on


_on = _Switch()


def enabled() -> bool:
    return _on.instruments is not None


def setup(service_name: str) -> None:
    """Export over OTLP/HTTP every OTEL_METRIC_EXPORT_INTERVAL (60 s by default)."""
    from opentelemetry.sdk.metrics.export import (
        ConsoleMetricExporter,
        PeriodicExportingMetricReader,
    )

    exporter: Any
    if os.environ.get("OTEL_METRICS_EXPORTER", "").strip().lower() == "console":
        exporter = ConsoleMetricExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        exporter = OTLPMetricExporter()
    install(make_provider(service_name, PeriodicExportingMetricReader(exporter)))


def make_provider(service_name: str, reader: MetricReader) -> MeterProvider:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.resources import Resource

    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": service_name}
    return MeterProvider([reader], resource=Resource.create(attributes))


def install(provider: MeterProvider) -> None:
    _on.instruments = _Instruments(provider)


def uninstall() -> None:
    _on.instruments = None


def shutdown() -> None:
    if (_instruments := _on.instruments) is not None:
        _instruments.provider.shutdown()


def claimed(taken_over: bool) -> None:
    if (_instruments := _on.instruments) is not None:
        _instruments.claims.add(1, {"noeta.claim.taken_over": taken_over})
        if taken_over:
            _instruments.takeovers.add(1)


def conflict(operation: str) -> None:
    if (_instruments := _on.instruments) is not None:
        _instruments.conflicts.add(1, {"noeta.store.operation": operation})


def commit_unknown(operation: str) -> None:
    if (_instruments := _on.instruments) is not None:
        _instruments.commit_unknowns.add(1, {"noeta.store.operation": operation})


def job_lost() -> None:
    if (_instruments := _on.instruments) is not None:
        _instruments.jobs_lost.add(1)


def model_call(seconds: float, provider: str, model: str, error_type: str) -> None:
    if (_instruments := _on.instruments) is not None:
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
        }
        if error_type:
            attributes["error.type"] = error_type
        _instruments.model_duration.record(seconds, attributes)


def tokens(provider: str, model: str, input_tokens: int, output_tokens: int) -> None:
    if (_instruments := _on.instruments) is not None:
        base = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
        }
        _instruments.token_usage.record(input_tokens, {**base, "gen_ai.token.type": "input"})
        _instruments.token_usage.record(output_tokens, {**base, "gen_ai.token.type": "output"})


def tool_call(seconds: float, name: str, error_type: str) -> None:
    if (_instruments := _on.instruments) is not None:
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
        if error_type:
            attributes["error.type"] = error_type
        _instruments.tool_duration.record(seconds, attributes)


def queue_depth(depth: Mapping[str, int]) -> None:
    """The store's latest count of claimable tasks per queue (read by the worker)."""
    if (_instruments := _on.instruments) is not None:
        _instruments.depth = dict(depth)
