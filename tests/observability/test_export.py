"""Off means off: without OTEL_* variables asking for export, a worker, `noeta run` and the
kernel never import opentelemetry (ADR-0024, ADR-0026)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.cli.test_run import EXAMPLE

PROBE = """
import sys
import noeta.cli.run, noeta.cli.scheduler, noeta.cli.worker, noeta.core.runner.task
from noeta import observability
observability.start("probe")
loaded = sorted(name for name in sys.modules if name.split(".")[0] == "opentelemetry")
print(" ".join(loaded) or "none")
"""


def test_without_otel_variables_opentelemetry_is_never_imported() -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    probe = subprocess.run(
        [sys.executable, "-c", PROBE], env=environment, capture_output=True, text=True, check=True
    )
    assert probe.stdout.strip() == "none"


def test_console_export_does_import_it() -> None:
    """The probe can see an import: asked to export, the same start loads the SDK."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environment["OTEL_TRACES_EXPORTER"] = "console"
    probe = subprocess.run(
        [sys.executable, "-c", PROBE], env=environment, capture_output=True, text=True, check=True
    )
    assert "opentelemetry.sdk.trace" in probe.stdout.split()


def _without_otel() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}


def test_console_spans_go_to_stderr_and_leave_the_answer_alone(tmp_path: Path) -> None:
    environment = _without_otel() | {"OTEL_TRACES_EXPORTER": "console"}
    store = f"sqlite:///{tmp_path / 'n.db'}"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "noeta",
            "run",
            "hi",
            "--model",
            f"scripted:{EXAMPLE}",
            "--store",
            store,
        ],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Every task has exactly one writer") and "trace_id" not in (
        result.stdout
    )
    assert '"trace_id"' in result.stderr


UNREACHABLE = """
import sys, time
from noeta.observability import export, tracing
export.start("probe")
from opentelemetry import trace
trace.get_tracer("probe").start_span("probe").end()
began = time.monotonic()
export.shutdown(limit_seconds=0.5)
print(f"{time.monotonic() - began:.3f}")
"""


def test_an_unreachable_endpoint_costs_the_limit_and_one_line_at_exit() -> None:
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    environment = _without_otel() | {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://u:hunter2secret@127.0.0.1:{port}"
    }
    probe = subprocess.run(
        [sys.executable, "-c", UNREACHABLE],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert float(probe.stdout) < 2.0  # the limit is 0.5 s; the exporter alone retries ~10 s
    lines = probe.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("noeta: telemetry not exported: "), lines
    assert "hunter2secret" not in probe.stderr
