"""`client.usage(task)`: a task's tokens and cost, its subtasks included, at the config's
prices; unknown (None), never 0, where a price or a reply's usage is missing."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from noeta.backends.stores import open_store
from noeta.client import AsyncClient, Client
from noeta.config import Config
from noeta.core.ports.model import Text, Usage
from noeta.core.ports.store import NewEvent, NewTask
from noeta.core.rules import events
from noeta.core.rules.prices import price_table

MODEL = "openai:my-model"
PRICES = price_table({MODEL: {"input": 2, "output": 8, "cache_read": 0.5, "cache_write": 0}})


async def made(url: str, task_id: str, *log: events.Event) -> None:
    store = await open_store(url, migrate=True)
    try:
        assert await store.create_task(NewTask(task_id, [NewEvent(*events.encode(e)) for e in log]))
    finally:
        await store.close()


def reply(usage: Usage | None) -> events.ModelReplied:
    return events.ModelReplied((Text("ok"),), "end_turn", usage)


async def test_usage_and_cost_of_a_task_and_its_subtasks(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'noeta.db'}"
    await made(
        url,
        "p",
        events.TaskCreated(MODEL, "plan"),
        events.ModelCalled("a", "", 500),
        reply(Usage(1_000_000, 100_000, 2_000_000, 0, 60_000)),
        events.SubtaskLaunched("c1", "c", "look"),
        events.ModelCalled("b", "", 250_000),  # open: its worker died mid-call
    )
    await made(url, "c", events.TaskCreated(MODEL, "look"), events.ModelCalled("c", "", 9))
    await made(url, "c-reply", events.TaskCreated(MODEL, "x"), reply(None))
    async with AsyncClient(url, config=Config(prices=PRICES)) as client:
        usage = await client.usage("p")
        without = await client.usage("c-reply")
    assert usage.usage == Usage(1_000_000, 100_000, 2_000_000, 0, 60_000)
    assert usage.cost == Decimal(2) + Decimal("0.8") + Decimal(1)
    assert usage.possibly_billed == 2  # the parent's open call and the child's
    assert usage.possibly_billed_cost == Decimal("0.500018")
    assert without.cost is None and without.costs[0].unknown_because == "1 reply said no usage"

    with Client(url) as blocking:  # the bundled prices: no price for this model
        assert blocking.usage("p").cost is None
