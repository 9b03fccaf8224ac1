"""Prices: the bundled table with its date, noeta.yaml's `prices:` over it, one clear
error per bad entry, and a cost that is unknown (never 0) without a price or a usage."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import pytest

from noeta.config import load_config
from noeta.core.errors import ConfigError
from noeta.core.ports.model import Usage
from noeta.core.rules.ledger import ModelLedger
from noeta.core.rules.prices import (
    BUNDLED,
    PRICES_CHECKED,
    cost_of,
    format_usd,
    price_of,
    total_cost,
)

SONNET = "anthropic:claude-sonnet-4-5"


def test_the_bundled_table_is_dated_and_knows_the_default_models_and_their_snapshots() -> None:
    assert PRICES_CHECKED
    assert price_of(SONNET, BUNDLED) == BUNDLED[SONNET]
    assert price_of("anthropic:claude-sonnet-4-5-20250929", BUNDLED) == BUNDLED[SONNET]
    assert price_of("openai:gpt-4o-mini-2024-07-18", BUNDLED) == BUNDLED["openai:gpt-4o-mini"]
    # A name that only starts like a known one is another model: no price, not a guess.
    assert price_of("openai:gpt-4o-audio-preview", BUNDLED) is None


def test_a_cost_sums_each_kind_at_its_price_and_the_possibly_billed_input_apart() -> None:
    entry = ModelLedger(
        SONNET,
        replies=2,
        usage=Usage(1_000, 2_000, 1_000_000, 100_000, 500),
        possibly_billed=1,
        possibly_billed_input=10_000,
    )
    cost = cost_of(entry, BUNDLED)
    # $3 in, $15 out (reasoning is part of it), $0.30 cache read, $3.75 cache write.
    assert cost.billed == Decimal("0.003") + Decimal("0.03") + Decimal("0.3") + Decimal("0.375")
    assert cost.possibly_billed == Decimal("0.03")
    assert format_usd(cost.billed) == "$0.708000"


def test_a_scripted_model_is_free_a_known_price_not_an_unknown_one() -> None:
    scripted = ModelLedger("scripted:examples/hello.yaml", replies=1, usage=Usage(10, 5))
    assert cost_of(scripted, BUNDLED).billed == Decimal(0)
    assert cost_of(scripted, BUNDLED).unknown_because == ""


def test_a_model_with_no_price_or_a_reply_without_usage_costs_unknown_never_0() -> None:
    no_price = cost_of(ModelLedger("openai:my-finetune", replies=1, usage=Usage(5, 5)), BUNDLED)
    assert (no_price.billed, no_price.unknown_because) == (None, "no price for openai:my-finetune")
    said_none = cost_of(ModelLedger(SONNET, replies=2, replies_without_usage=1), BUNDLED)
    assert (said_none.billed, said_none.unknown_because) == (None, "1 reply said no usage")
    assert total_cost((no_price, cost_of(ModelLedger(SONNET), BUNDLED))) is None
    assert format_usd(None) == "unknown"


def test_prices_in_noeta_yaml_lay_over_the_bundled_table(tmp_path: Path) -> None:
    config = tmp_path / "noeta.yaml"
    config.write_text(
        "prices:\n"
        f"  {SONNET}: {{input: 2.5}}\n"
        "  openai:my-finetune: {input: 1, output: 4, cache_read: 0.5, cache_write: 0}\n"
    )
    prices = load_config(str(config)).prices
    assert prices[SONNET].input == Decimal("2.5")
    assert prices[SONNET].output == BUNDLED[SONNET].output  # left out: the bundled price
    assert prices["openai:my-finetune"].output == Decimal(4)
    assert load_config(None).prices == BUNDLED


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ("{input: -1}", "input: -1 is negative; a price is 0 or more"),
        ("{input: lots}", "input: 'lots' is not a number"),
        ("{input: .nan}", "input: nan is not a number"),
        ("{input: true}", "input: True is not a number"),
        ("{reasoning: 1}", "unknown token kind 'reasoning' (known: input, output, "),
        ("3", "a mapping of token kind to USD per million"),
    ],
)
def test_a_bad_price_is_one_clear_config_error(tmp_path: Path, entry: str, said: str) -> None:
    config = tmp_path / "noeta.yaml"
    config.write_text(f"workspaces: /tmp/w\nprices:\n  {SONNET}: {entry}\n")
    with pytest.raises(ConfigError) as error:
        load_config(str(config))
    assert f"noeta.yaml, line 2: prices: {SONNET}: " in str(error.value)
    assert said in str(error.value)


def test_a_new_model_needs_every_kind_and_a_model_spec(tmp_path: Path) -> None:
    config = tmp_path / "noeta.yaml"
    config.write_text("prices:\n  openai:mine: {input: 1, output: 2}\n")
    with pytest.raises(ConfigError, match="missing cache_read, cache_write"):
        load_config(str(config))
    config.write_text("prices:\n  gpt-9: {input: 1}\n")
    with pytest.raises(ConfigError, match="'gpt-9' is not a model spec"):
        load_config(str(config))


def test_the_readmes_prices_example_loads(tmp_path: Path) -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    [block] = [b for b in re.findall(r"```yaml\n(.*?)```", readme, re.S) if "prices:" in b]
    config = tmp_path / "noeta.yaml"
    config.write_text(block)
    prices = load_config(str(config)).prices
    assert prices["openai:my-finetune"].output == Decimal(4)
