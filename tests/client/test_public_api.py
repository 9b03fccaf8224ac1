"""noeta's public API: what `import noeta` offers is pinned here; changing it is a
decision (docs/api.md), not an accident."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import noeta

PUBLIC = [
    "AsyncClient",
    "CanvasRefused",
    "Client",
    "ConfigError",
    "ForkRefused",
    "NoetaError",
    "PayloadError",
    "ResultTimeout",
    "Signature",
    "SoftTimeLimitExceeded",
    "StoreError",
    "Submission",
    "TailedEvent",
    "TaskCancelled",
    "TaskFailed",
    "TaskHandle",
    "ToolContext",
    "ToolError",
    "UnknownJob",
    "UnknownTask",
    "chain",
    "chord",
    "group",
    "signature",
    "tool",
]


def test_all_is_pinned_and_every_name_resolves() -> None:
    assert sorted(noeta.__all__) == PUBLIC
    for name in PUBLIC:
        assert getattr(noeta, name) is not None
    assert issubclass(noeta.TaskFailed, noeta.NoetaError)
    assert (Path(noeta.__file__).parent / "py.typed").exists()


def test_importing_noeta_loads_no_driver() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", "import noeta, sys; print('psycopg' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert loaded.stdout.strip() == "False"
