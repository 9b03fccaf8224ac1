"""The environment a tool's process starts with: built from an allowlist, never the worker's.

The worker's environment holds the store's password and the providers' keys; a command or
an MCP server the model drives gets only what is named here or by the operator (ADR-0034).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

# Enough for programs to find each other and print text the way the operator expects.
ALLOWED_NAMES = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "TERM"})
ALLOWED_PREFIXES = ("LC_",)
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Every name a loaded plugin passes to its tools' processes (via `passed_names`): the
# worker scrubs their values from its logs and spans, since a command can print them.
PASSED_NAMES: set[str] = set()


def tool_environment(
    home: str | None, passed: Sequence[str] = (), tmpdir: str | None = None
) -> dict[str, str]:
    """The allowlisted variables, HOME set to `home` and TMPDIR to `tmpdir` (when given),
    and the `passed` names the operator chose for this tool in noeta.yaml (those not set
    are left out)."""
    environment = {
        name: value
        for name, value in os.environ.items()
        if name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES)
    }
    environment.setdefault("PATH", DEFAULT_PATH)
    if home is not None:
        environment["HOME"] = home
    if tmpdir is not None:
        environment["TMPDIR"] = tmpdir  # a confined command cannot write to /tmp
    for name in passed:
        if (value := os.environ.get(name)) is not None:
            environment[name] = value
    return environment


def passed_names(where: str, value: object) -> tuple[str, ...]:
    """A `pass_env:` list from noeta.yaml: variable names; ValueError naming `where`."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(
        isinstance(name, str) and _NAME.fullmatch(name) for name in value
    ):
        raise ValueError(f"{where}: 'pass_env' must be a list of environment variable names")
    PASSED_NAMES.update(value)
    return tuple(value)
