"""The jobs the cluster's canvases are made of (a module of decorated functions is a
plugin every worker loads; a job's name is its process's, hence the prefix).
`cluster_add` is pure; `cluster_collect`, a chain's last link and a chord's callback, is
a side effect: it appends "<task>:<call>=<what it received>" to the cluster ledger
(NOETA_CLUSTER_LEDGER) with a pause on either side, and after a crash its recover looks
the marker up there, as the ledger plugin's Record does (not retry_safe)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import noeta
from noeta.core.ports.tool import ToolContext


@noeta.tool(retry_safe=True)
def cluster_add(x: int, y: int) -> int:
    time.sleep(0.05)  # long enough for a kill to land in a member now and then
    return x + y


def marker(ctx: ToolContext, received: Any) -> str:
    """One run's ledger line: the call, and what it received (no blank in it)."""
    return f"{ctx.idempotency_key}={json.dumps(received, separators=(',', ':'))}"


def _find(ctx: ToolContext, received: Any) -> Any:
    ledger = Path(os.environ["NOETA_CLUSTER_LEDGER"]).read_text().split()
    return received if marker(ctx, received) in ledger else None


@noeta.tool(recover=_find)
def cluster_collect(received: Any, ctx: ToolContext) -> Any:
    time.sleep(0.1)
    with open(os.environ["NOETA_CLUSTER_LEDGER"], "a", encoding="ascii") as ledger:
        ledger.write(marker(ctx, received) + "\n")
    time.sleep(0.1)
    return received
