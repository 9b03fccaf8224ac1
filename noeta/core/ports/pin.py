"""Pin: exactly which plugin a task ran with, one type from the plugin port to the log.

Its own module, importing only the payload types, so the pure modules (events, fold,
next_action) can use it without pulling in the tool port.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from noeta.core.ports.payload import JSONValue


@dataclass(frozen=True, slots=True)
class Pin:
    name: str
    source: str  # "module:noeta.plugins.core", "entry_point:acme", "file:/opt/p.py"
    version: str  # the package version, or "sha256:<hash>" of the module file
    params_hash: str

    def as_tuple(self) -> tuple[str, str, str, str]:
        """The pin as events and snapshots store it: its four strings, in this order."""
        return (self.name, self.source, self.version, self.params_hash)


def params_hash(params: dict[str, JSONValue]) -> str:
    text = json.dumps(params, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:16]
