"""The plugin port: what a plugin contributes (tools, gates), and its pin.

A pin records exactly which plugin a task ran with: name, where it came from, its package
version or file hash, and a hash of its parameters. Pins are logged when a task first
starts and whenever a claimer finds them changed; a worker lacking a pinned plugin never
runs the task (ADR-023).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from noeta.core.payload import JSONValue
from noeta.core.tool import Tool


@dataclass(frozen=True, slots=True)
class Pin:
    name: str
    source: str  # "module:noeta.plugins.core", "entry_point:acme", "file:/opt/p.py"
    version: str  # the package version, or "sha256:<hash>" of the module file
    params_hash: str


def params_hash(params: dict[str, JSONValue]) -> str:
    text = json.dumps(params, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:16]


class Plugin(Protocol):
    name: str

    def tools(self) -> Sequence[Tool]: ...
