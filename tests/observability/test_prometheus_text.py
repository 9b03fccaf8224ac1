"""What a Prometheus scrape reads: noeta's instruments in the text format, under
OpenTelemetry's Prometheus names, with bounded labels only, beside the process's own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from noeta.observability import instruments, metrics, prometheus


@pytest.fixture
def scraped() -> Iterator[None]:
    instruments.install(instruments.make_provider("noeta-test", prometheus.pull_reader()))
    yield
    metrics.uninstall()


def test_the_instruments_read_as_prometheus_text(scraped: None) -> None:
    metrics.claimed(taken_over=True)
    metrics.tool_call(0.2, "Bash", "")
    sink = metrics._on.sink
    assert sink is not None
    sink.set_queue_depth({"default": 3})
    sink.set_queue_load({("default", None): 2, ("default", "tenant-a"): 1}, {"default": 4})

    body, content_type = prometheus.render()
    text = body.decode()

    assert content_type.startswith("text/plain; version=")
    assert 'noeta_claims_total{noeta_claim_taken_over="true"} 1.0' in text
    assert "noeta_takeovers_total 1.0" in text
    assert 'noeta_queue_depth{noeta_queue="default"} 3.0' in text
    assert 'noeta_queue_running{noeta_concurrency_key="",noeta_queue="default"} 2.0' in text
    assert 'noeta_queue_running{noeta_concurrency_key="tenant-a",noeta_queue="default"} 1.0' in text
    assert 'noeta_queue_waiting_for_slot{noeta_queue="default"} 4.0' in text
    bucket = 'noeta_tool_duration_seconds_bucket{gen_ai_operation_name="execute_tool",'
    assert bucket + 'gen_ai_tool_name="Bash",le="+Inf"} 1.0' in text
    assert "process_cpu_seconds_total" in text  # the process's own, from prometheus_client
