"""noeta: durable AI-agent tasks and plain Python jobs on PostgreSQL.

The public API is what `__all__` names (pinned by tests/client/test_public_api.py). It is
imported on first use, so `import noeta.core…` stays free of drivers and plugins.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from noeta.client import (
        AsyncClient,
        Client,
        ForkRefused,
        Submission,
        TailedEvent,
        TaskHandle,
        UnknownJob,
    )
    from noeta.client.canvas import CanvasRefused, Signature, chain, chord, group, signature
    from noeta.core.errors import (
        ConfigError,
        NoetaError,
        PayloadError,
        ResultTimeout,
        SoftTimeLimitExceeded,
        StoreError,
        TaskCancelled,
        TaskFailed,
        UnknownTask,
    )
    from noeta.core.ports.tool import ToolContext, ToolError
    from noeta.plugins.function_tools import tool

__all__ = [
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

_HOME = {
    "AsyncClient": "noeta.client",
    "Client": "noeta.client",
    "ForkRefused": "noeta.client.forking",
    "Submission": "noeta.client",
    "TailedEvent": "noeta.client",
    "TaskHandle": "noeta.client",
    "UnknownJob": "noeta.client",
    "ConfigError": "noeta.core.errors",
    "NoetaError": "noeta.core.errors",
    "PayloadError": "noeta.core.errors",
    "ResultTimeout": "noeta.core.errors",
    "SoftTimeLimitExceeded": "noeta.core.errors",
    "StoreError": "noeta.core.errors",
    "TaskCancelled": "noeta.core.errors",
    "TaskFailed": "noeta.core.errors",
    "UnknownTask": "noeta.core.errors",
    "ToolContext": "noeta.core.ports.tool",
    "ToolError": "noeta.core.ports.tool",
    "tool": "noeta.plugins.function_tools",
    **dict.fromkeys(
        ("CanvasRefused", "Signature", "chain", "chord", "group", "signature"),
        "noeta.client.canvas",
    ),
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'noeta' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


def __dir__() -> list[str]:
    return sorted(__all__)
