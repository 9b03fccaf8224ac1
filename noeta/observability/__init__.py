"""Observability over OpenTelemetry: one trace per task, metrics, store spans (ADR-0024).

The one entry point processes (the worker, `noeta run`, the scheduler) call: `start` and
`shutdown` export, wrap their store with `observed`, and keep secrets out of spans and
log lines. The kernel calls only the `tracing` facade, which imports no opentelemetry.
"""

from __future__ import annotations

from noeta.observability.export import shutdown, start
from noeta.observability.observed_store import observed
from noeta.observability.tracing import add_passed_secrets, add_secrets, claim_lost, scrub_logs

__all__ = [
    "add_passed_secrets",
    "add_secrets",
    "claim_lost",
    "observed",
    "scrub_logs",
    "shutdown",
    "start",
]
