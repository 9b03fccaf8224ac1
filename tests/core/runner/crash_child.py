"""A process that claims one task and runs it; the crash tests kill it at failure points.

    python -m tests.core.runner.crash_child STORE_URL TASK_ID LEDGER

Its tools write every effect to LEDGER (one line: idempotency key and tool), so the
test can count effects across processes.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass, field
from pathlib import Path

from noeta.backends.models.registry import ProviderRegistry
from noeta.backends.stores import open_store
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.tool import ToolContext, ToolFlags, ToolOutput
from noeta.core.runner.task import TaskRunner
from tests.core.runner.predecessor import LEASE, free_the_dead_predecessors_claims


@dataclass
class LedgerTool:
    name: str
    ledger: Path
    flags: ToolFlags = field(default_factory=ToolFlags)
    description: str = "Does something with a side effect, written to the ledger."
    input_schema: dict[str, JSONValue] = field(default_factory=lambda: {"type": "object"})

    async def run(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput:
        with self.ledger.open("a") as ledger:
            ledger.write(f"{ctx.idempotency_key} {self.name}\n")
        return ToolOutput(f"{self.name} done")


@dataclass
class RecoverableLedgerTool(LedgerTool):
    async def recover(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput | None:
        lines = self.ledger.read_text().splitlines() if self.ledger.exists() else []
        if f"{ctx.idempotency_key} {self.name}" in lines:
            return ToolOutput(f"{self.name} done (found by recover)")
        return None


async def main(url: str, task_id: str, ledger: Path) -> None:
    store = await open_store(url)
    tools = {
        "Charge": LedgerTool("Charge", ledger),
        "Lookup": LedgerTool("Lookup", ledger, ToolFlags(retry_safe=True)),
        "Pay": RecoverableLedgerTool("Pay", ledger),
    }
    try:
        await free_the_dead_predecessors_claims(store, "crash-child")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while (claim := await store.claim_task("crash-child", task_id, LEASE)) is None:
            if loop.time() > deadline:
                raise SystemExit("the task never became claimable")
            await asyncio.sleep(0.05)
        result = await TaskRunner(store, ProviderRegistry(), tools).run(claim)
        print(result.outcome, result.state.finished)
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], Path(sys.argv[3])))
