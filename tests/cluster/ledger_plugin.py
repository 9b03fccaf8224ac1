"""A plugin for the cluster run. `Pause` changes nothing but takes a while (retry_safe: a
crash in it is settled by running it again). `Record`, a side effect that can be recovered, appends
"<task>:<call>" to the ledger (NOETA_CLUSTER_LEDGER) with a pause on either side, and
after a crash its `recover` looks the marker up there: found, the call is settled as
done without running again; not found, as outcome unknown (it is not retry_safe)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from noeta.core.ports.payload import JSONValue
from noeta.core.ports.tool import Tool, ToolContext, ToolFlags, ToolOutput


class Record:
    name = "Record"
    description = "Record this call's marker in the cluster ledger, once."
    input_schema: ClassVar[dict[str, JSONValue]] = {"type": "object", "properties": {}}
    flags = ToolFlags()

    async def run(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput:
        await asyncio.sleep(0.2)
        await asyncio.to_thread(_append, ctx.idempotency_key + "\n")
        await asyncio.sleep(0.2)
        return ToolOutput("recorded")

    async def recover(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput | None:
        ledger = await asyncio.to_thread(Path(os.environ["NOETA_CLUSTER_LEDGER"]).read_text)
        found = ctx.idempotency_key in ledger.split()
        return ToolOutput("recorded (found after a crash)") if found else None


def _append(line: str) -> None:
    with open(os.environ["NOETA_CLUSTER_LEDGER"], "a", encoding="ascii") as ledger:
        ledger.write(line)


class Pause:
    name = "Pause"
    description = "Wait a moment; changes nothing."
    input_schema: ClassVar[dict[str, JSONValue]] = {"type": "object", "properties": {}}
    flags = ToolFlags(retry_safe=True)

    async def run(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput:
        await asyncio.sleep(0.5)
        return ToolOutput("paused")


class LedgerPlugin:
    name = "cluster-ledger"

    def tools(self) -> Sequence[Tool]:
        return (Record(), Pause())


def plugin(params: dict[str, JSONValue]) -> LedgerPlugin:
    return LedgerPlugin()
