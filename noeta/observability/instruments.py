"""The OpenTelemetry metric instruments behind `noeta.observability.metrics`: a meter
provider, its counters, histograms and queue-depth gauge, and their OTLP export."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from opentelemetry.metrics import CallbackOptions, Counter, Histogram, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.resources import Resource

from noeta.observability import metrics, names
from noeta.observability.metrics import Attributes


class Instruments:
    """A meter provider's instruments; the sink `metrics` records through."""

    def __init__(self, provider: MeterProvider) -> None:
        self.provider = provider
        meter = provider.get_meter("noeta")
        self.counters: dict[str, Counter] = {
            metrics.CLAIMS: meter.create_counter(metrics.CLAIMS, "{claim}", "Tasks claimed"),
            metrics.TAKEOVERS: meter.create_counter(
                metrics.TAKEOVERS, "{claim}", "Claims that took a task whose lease had lapsed"
            ),
            metrics.CONFLICTS: meter.create_counter(
                metrics.CONFLICTS, "{append}", "Appends refused: the claim had passed on"
            ),
            metrics.COMMIT_UNKNOWNS: meter.create_counter(
                metrics.COMMIT_UNKNOWNS, "{write}", "Writes whose outcome is unknown"
            ),
            metrics.JOBS_LOST: meter.create_counter(
                metrics.JOBS_LOST, "{job}", "Background jobs recorded lost with their worker"
            ),
            metrics.MODEL_THROTTLED: meter.create_counter(
                metrics.MODEL_THROTTLED, "{response}", "Model calls the provider answered 429"
            ),
            metrics.MODEL_COST: meter.create_counter(
                metrics.MODEL_COST, "USD", "What model replies cost, at the worker's prices"
            ),
        }
        self.histograms: dict[str, Histogram] = {
            metrics.MODEL_DURATION: meter.create_histogram(
                metrics.MODEL_DURATION, "s", "Model calls, retries included"
            ),
            metrics.TOKEN_USAGE: meter.create_histogram(
                metrics.TOKEN_USAGE, "{token}", "Tokens per model call"
            ),
            metrics.TOOL_DURATION: meter.create_histogram(
                metrics.TOOL_DURATION, "s", "Tool calls (execute_tool)"
            ),
            metrics.MODEL_BUDGET_WAIT: meter.create_histogram(
                metrics.MODEL_BUDGET_WAIT, "s", "Waits for a shared model limit's budget"
            ),
        }
        self.depth: dict[str, int] = {}

        def observe(options: CallbackOptions) -> list[Observation]:
            return [Observation(n, {names.QUEUE: q}) for q, n in self.depth.items()]

        meter.create_observable_gauge(
            metrics.QUEUE_DEPTH, [observe], "{task}", "Tasks claimable now, per queue"
        )
        self.running: dict[tuple[str, str | None], int] = {}
        self.waiting: dict[str, int] = {}

        def observe_running(options: CallbackOptions) -> list[Observation]:
            return [
                Observation(n, {names.QUEUE: q} | ({names.CONCURRENCY_KEY: k} if k else {}))
                for (q, k), n in self.running.items()
            ]

        def observe_waiting(options: CallbackOptions) -> list[Observation]:
            return [Observation(n, {names.QUEUE: q}) for q, n in self.waiting.items()]

        meter.create_observable_gauge(
            metrics.QUEUE_RUNNING,
            [observe_running],
            "{task}",
            "Live claims per queue, and per concurrency key for a queue's busiest keys",
        )
        meter.create_observable_gauge(
            metrics.QUEUE_WAITING_FOR_SLOT,
            [observe_waiting],
            "{task}",
            "Claimable tasks a queue's concurrency or pause holds back",
        )

    def add(self, counter: str, amount: float, attributes: Attributes) -> None:
        self.counters[counter].add(amount, dict(attributes))

    def record(self, histogram: str, value: float, attributes: Attributes) -> None:
        self.histograms[histogram].record(value, dict(attributes))

    def set_queue_depth(self, depth: Mapping[str, int]) -> None:
        self.depth = dict(depth)

    def set_queue_load(
        self, running: Mapping[tuple[str, str | None], int], waiting: Mapping[str, int]
    ) -> None:
        self.running, self.waiting = dict(running), dict(waiting)

    def shutdown(self) -> None:
        self.provider.shutdown()


def make_provider(service_name: str, reader: MetricReader) -> MeterProvider:
    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": service_name}
    # No atexit shutdown of its own: export.shutdown bounds the one at exit.
    return MeterProvider([reader], resource=Resource.create(attributes), shutdown_on_exit=False)


def install(provider: MeterProvider) -> None:
    """Record metrics through `provider` from now on (`start` does this; tests pass theirs)."""
    metrics.switch_on(Instruments(provider))


def start(service_name: str) -> None:
    """Export over OTLP/HTTP every OTEL_METRIC_EXPORT_INTERVAL (60 s by default)."""
    from opentelemetry.sdk.metrics.export import (
        ConsoleMetricExporter,
        PeriodicExportingMetricReader,
    )

    exporter: Any
    if os.environ.get("OTEL_METRICS_EXPORTER", "").strip().lower() == "console":
        exporter = ConsoleMetricExporter(out=sys.stderr)  # stdout is the command's answer
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        exporter = OTLPMetricExporter()
    install(make_provider(service_name, PeriodicExportingMetricReader(exporter)))
