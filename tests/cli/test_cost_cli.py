"""What a task cost, where operators look: `noeta show` (per model, subtasks included,
"possibly billed" apart, unknown never 0) and `noeta tasks --cost` (a column, --sort cost)."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from noeta.core.ports.model import Text, Usage
from noeta.core.rules import events
from tests.cli.test_result import created
from tests.cli.test_run import noeta, one_line_error

SONNET = "anthropic:claude-sonnet-4-5"
HAIKU = "anthropic:claude-haiku-4-5"


def reply(usage: Usage | None) -> events.ModelReplied:
    return events.ModelReplied((Text("ok"),), "end_turn", usage)


@pytest.fixture
def store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'noeta.db'}"
    created(
        url,
        "parent",
        events.TaskCreated(SONNET, "plan"),
        events.ModelCalled("a", "", 4_000),
        events.ModelCallCut(1, "worker_lost"),  # possibly billed: ~4,000 input tokens
        events.ModelCalled("a", "", 4_000),
        reply(Usage(1_000, 500, 2_000_000, 0)),
        events.SubtaskLaunched("c1", "child", "look it up"),
    )
    created(
        url,
        "child",
        events.TaskCreated(HAIKU, "look it up"),
        events.SubtaskOf("parent", "c1", 1),
        events.ModelCalled("b", "", 100),
        reply(Usage(100_000, 10_000, 0, 40_000)),
    )
    created(
        url,
        "mystery",
        events.TaskCreated("openai:my-finetune", "hi"),
        events.ModelCalled("c", "", 10),
        reply(Usage(10, 10)),
    )
    return url


# The parent: 1,000 in x $3 + 500 out x $15 + 2M cache reads x $0.30 = $0.6105;
# the child: 100k in x $1 + 10k out x $5 + 40k cache writes x $1.25 = $0.2.
PARENT_COST = Decimal("0.6105")
CHILD_COST = Decimal("0.2")


def test_show_sums_the_tree_per_model_with_the_possibly_billed_apart(store: str) -> None:
    shown = noeta("show", "parent", store=store)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    total = next(line for line in lines if line.startswith("usage"))
    assert total == "usage (with subtasks): cost $0.810500 + possibly billed $0.012000"
    [sonnet] = [line for line in lines if line.startswith(f"  {SONNET}")]
    assert "1 reply, in 1,000 cache read 2,000,000 cache write 0 out 500  $0.610500" in sonnet
    assert "possibly billed: 1 request with no reply, ~4,000 input tokens" in sonnet

    document = json.loads(noeta("show", "parent", "--json", store=store).stdout)["usage"]
    assert Decimal(document["cost_usd"]) == PARENT_COST + CHILD_COST
    assert document["possibly_billed"] == 1
    assert [m["model"] for m in document["models"]] == [HAIKU, SONNET]


def test_a_model_with_no_price_shows_unknown_until_noeta_yaml_prices_it(
    store: str, tmp_path: Path
) -> None:
    shown = noeta("show", "mystery", store=store).stdout
    assert "usage (with subtasks): cost unknown" in shown
    assert "(no price for openai:my-finetune)" in shown
    config = tmp_path / "noeta.yaml"
    config.write_text(
        "prices:\n  openai:my-finetune: {input: 1, output: 3, cache_read: 0.5, cache_write: 0}\n"
    )
    priced = noeta("show", "mystery", "--config", str(config), store=store).stdout
    assert "usage (with subtasks): cost $0.000040" in priced
    config.write_text("prices:\n  openai:my-finetune: {input: -1}\n")
    refused = noeta("show", "mystery", "--config", str(config), store=store)
    assert "prices: openai:my-finetune: input: -1 is negative" in one_line_error(refused)


def test_tasks_cost_is_a_column_and_a_sort(store: str) -> None:
    listed = noeta("tasks", "--columns", "id", "--cost", "--sort", "cost", store=store)
    assert listed.returncode == 0, listed.stderr
    rows = [line.split(None, 1) for line in listed.stdout.splitlines()]
    assert rows == [
        ["id", "cost"],
        ["parent", "$0.810500 +1 possibly billed"],
        ["child", "$0.200000"],
        ["mystery", "unknown"],
    ]
