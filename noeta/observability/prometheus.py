"""noeta's metrics in Prometheus's text format (`/metrics` of `--health`): what the
instruments record, read through an in-memory reader at each scrape and written by
prometheus_client, beside its process, platform and garbage-collector metrics.

Names follow OpenTelemetry's Prometheus mapping: dots become underscores, seconds add
`_seconds`, counters `_total` (`noeta.claims` is `noeta_claims_total`); attributes
become labels the same way. No label is unbounded: no task id is ever an attribute.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from opentelemetry.sdk.metrics.export import Gauge, Histogram, InMemoryMetricReader, Sum

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import Metric
    from prometheus_client.metrics_core import Metric as Family
    from prometheus_client.registry import CollectorRegistry

_UNSAFE = re.compile(r"[^a-zA-Z0-9_]")
_UNITS = {"s": "seconds", "ms": "milliseconds", "By": "bytes"}


class _Pull:
    reader: InMemoryMetricReader | None = None
    registry: CollectorRegistry | None = None
    lock = threading.Lock()


_pull = _Pull()


def pull_reader() -> InMemoryMetricReader:
    """The reader the meter provider gets when metrics are scraped (one per process)."""
    if _pull.reader is None:
        _pull.reader = InMemoryMetricReader()
    return _pull.reader


def render() -> tuple[bytes, str]:
    """The scrape's body and its content type."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    with _pull.lock:
        if _pull.registry is None:
            _pull.registry = _registry()
    return generate_latest(_pull.registry), CONTENT_TYPE_LATEST


def _registry() -> CollectorRegistry:
    from prometheus_client import GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR
    from prometheus_client.registry import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        registry.register(collector)
    registry.register(_Recorded())
    return registry


def prometheus_name(name: str, unit: str) -> str:
    base = _UNSAFE.sub("_", name)
    suffix = _UNITS.get(unit, "")
    return f"{base}_{suffix}" if suffix and not base.endswith(suffix) else base


def _labels(attributes: object) -> dict[str, str]:
    items = dict(attributes or {}).items()  # type: ignore[call-overload]
    return {
        _UNSAFE.sub("_", str(key)): str(value).lower() if isinstance(value, bool) else str(value)
        for key, value in items
    }


class _Recorded:
    """A prometheus_client collector over the instruments' readings."""

    def collect(self) -> Iterator[Family]:
        reader = _pull.reader
        data = None if reader is None else reader.get_metrics_data()
        if data is None:
            return
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    family = _family(metric)
                    if family is not None:
                        yield family


def _family(metric: Metric) -> Family | None:
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )

    name = prometheus_name(metric.name, metric.unit or "")
    about = metric.description or metric.name
    data = metric.data
    if not isinstance(data, (Sum, Gauge, Histogram)):
        return None
    names = _label_names(data)

    def values(attributes: object) -> list[str]:
        labels = _labels(attributes)
        return [labels.get(label, "") for label in names]

    if isinstance(data, Sum) and data.is_monotonic:
        counter = CounterMetricFamily(name, about, labels=names)
        for point in data.data_points:
            counter.add_metric(values(point.attributes), point.value)
        return counter
    if isinstance(data, (Sum, Gauge)):
        gauge = GaugeMetricFamily(name, about, labels=names)
        for point in data.data_points:
            gauge.add_metric(values(point.attributes), point.value)
        return gauge
    histogram = HistogramMetricFamily(name, about, labels=names)
    for each in data.data_points:
        running, buckets = 0, []
        for bound, count in zip(each.explicit_bounds, each.bucket_counts, strict=False):
            running += count
            buckets.append((str(float(bound)), running))
        buckets.append(("+Inf", each.count))
        histogram.add_metric(values(each.attributes), buckets, each.sum)
    return histogram


def _label_names(data: Sum | Gauge | Histogram) -> list[str]:
    """Every label any point has: a point without one gets it empty, as Prometheus reads."""
    names: dict[str, None] = {}
    for point in data.data_points:
        names.update(dict.fromkeys(_labels(point.attributes)))
    return list(names)
