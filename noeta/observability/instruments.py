"""The OpenTelemetry metric instruments behind `noeta.observability.metrics`: a meter
provider, its counters, histograms and queue-depth gauge, and their OTLP export."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from opentelemetry.metrics import CallbackOptions, Counter, Histogram, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.resources import Resource

from noeta.core.ports.model_limits import ModelLimit
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
            metrics.MODEL_BUDGET_REFUSED: meter.create_counter(
                metrics.MODEL_BUDGET_REFUSED, "{call}", "Model calls a budget refused, not sent"
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

        self.limits: list[ModelLimit] = []
        limit_gauges = {
            metrics.MODEL_LIMIT_CALLS: ("{call}", "Model calls a shared limit let through"),
            metrics.MODEL_LIMIT_HANDBACKS: ("{task}", "Tasks handed back to wait for a limit"),
            metrics.MODEL_LIMIT_THROTTLED: ("{response}", "429s answered under a limit"),
            metrics.MODEL_LIMIT_PAUSED: ("1", "1 while a limit is paused (after a 429)"),
        }
        for name, (unit, about) in limit_gauges.items():
            meter.create_observable_gauge(name, [self._observe_limits(name)], unit, about)

    def _observe_limits(self, name: str) -> Callable[[CallbackOptions], list[Observation]]:
        def observe(options: CallbackOptions) -> list[Observation]:
            return [
                Observation(_limit_value(name, limit), {names.MODEL_LIMIT: limit.key})
                for limit in self.limits
            ]

        return observe

    def set_model_limits(self, limits: Sequence[ModelLimit]) -> None:
        self.limits = list(limits)

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


def _limit_value(name: str, limit: ModelLimit) -> int:
    if name == metrics.MODEL_LIMIT_PAUSED:
        until = limit.paused_until
        return int(until is not None and until > datetime.now(UTC))
    if name == metrics.MODEL_LIMIT_HANDBACKS:
        return limit.handbacks
    if name == metrics.MODEL_LIMIT_THROTTLED:
        return limit.throttled
    return limit.calls


def make_provider(service_name: str, *readers: MetricReader) -> MeterProvider:
    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": service_name}
    # No atexit shutdown of its own: export.shutdown bounds the one at exit.
    return MeterProvider(
        list(readers), resource=Resource.create(attributes), shutdown_on_exit=False
    )


def install(provider: MeterProvider, *, timed: bool = True) -> None:
    """Record metrics through `provider` from now on (`start` does this; tests pass theirs);
    `timed`: the store's gauges are read on a timer, not only when scraped."""
    metrics.switch_on(Instruments(provider), timed=timed)


def start(service_name: str, *, push: bool = True, pulled: Sequence[MetricReader] = ()) -> None:
    """Export over OTLP/HTTP every OTEL_METRIC_EXPORT_INTERVAL (60 s by default) if `push`;
    `pulled`: readers read when asked (the Prometheus scrape's)."""
    from opentelemetry.sdk.metrics.export import (
        ConsoleMetricExporter,
        PeriodicExportingMetricReader,
    )

    if not push:
        install(make_provider(service_name, *pulled), timed=False)
        return
    exporter: Any
    if os.environ.get("OTEL_METRICS_EXPORTER", "").strip().lower() == "console":
        exporter = ConsoleMetricExporter(out=sys.stderr)  # stdout is the command's answer
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        exporter = OTLPMetricExporter()
    install(make_provider(service_name, PeriodicExportingMetricReader(exporter), *pulled))
