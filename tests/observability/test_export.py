"""Off means off: without OTEL_* variables asking for export, a worker, `noeta run` and the
kernel never import opentelemetry (ADR-0024, ADR-0026)."""

from __future__ import annotations

import os
import subprocess
import sys

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
