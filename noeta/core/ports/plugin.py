"""The plugin port: what a plugin contributes (tools, gates), and its pin.

A pin records exactly which plugin a task ran with: name, where it came from, its package
version or file hash, and a hash of its parameters. Pins are logged when a task first
starts and whenever a claimer finds them changed; a worker lacking a pinned plugin never
runs the task (ADR-023).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from noeta.core.ports.pin import Pin, params_hash
from noeta.core.ports.tool import Tool

__all__ = ["Pin", "Plugin", "params_hash"]


class Plugin(Protocol):
    name: str

    def tools(self) -> Sequence[Tool]: ...
