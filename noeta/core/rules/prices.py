"""What tokens cost: the bundled price table (USD per million tokens, by kind), the
deployment's overrides (`prices:` in noeta.yaml), and a ledger's cost. A model with no
price, or a reply that said no usage, makes the cost unknown: never 0.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from noeta.core.errors import ConfigError
from noeta.core.rules.ledger import Ledger, ModelLedger

# When the bundled table was checked, against stored copies of the providers' pricing
# pages (platform.claude.com/docs/en/about-claude/pricing, openai.com/api/pricing), not
# the live pages: recheck before billing anyone, and override in noeta.yaml.
PRICES_CHECKED = "2026-12-02"

# The kinds a price is given for; each a field of `Usage` ("reasoning" is billed as output).
TOKEN_KINDS = ("input", "output", "cache_read", "cache_write")
MILLION = Decimal(1_000_000)


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens of each kind. Cache writes are Anthropic's 5-minute ones
    (noeta's only); OpenAI does not bill them."""

    input: Decimal
    output: Decimal
    cache_read: Decimal
    cache_write: Decimal


def _price(input: str, output: str, cache_read: str, cache_write: str) -> Price:
    return Price(Decimal(input), Decimal(output), Decimal(cache_read), Decimal(cache_write))


# Standard (not batch, not long-context) rates, by model spec.
BUNDLED: Mapping[str, Price] = {
    "anthropic:claude-opus-4-5": _price("5", "25", "0.50", "6.25"),
    "anthropic:claude-opus-4-1": _price("15", "75", "1.50", "18.75"),
    "anthropic:claude-opus-4-0": _price("15", "75", "1.50", "18.75"),
    "anthropic:claude-sonnet-4-5": _price("3", "15", "0.30", "3.75"),
    "anthropic:claude-sonnet-4-0": _price("3", "15", "0.30", "3.75"),
    "anthropic:claude-3-7-sonnet": _price("3", "15", "0.30", "3.75"),
    "anthropic:claude-haiku-4-5": _price("1", "5", "0.10", "1.25"),
    "anthropic:claude-3-5-haiku": _price("0.80", "4", "0.08", "1"),
    "anthropic:claude-3-haiku": _price("0.25", "1.25", "0.03", "0.30"),
    "openai:gpt-5": _price("1.25", "10", "0.125", "0"),
    "openai:gpt-5-mini": _price("0.25", "2", "0.025", "0"),
    "openai:gpt-5-nano": _price("0.05", "0.40", "0.005", "0"),
    "openai:gpt-4.1": _price("2", "8", "0.50", "0"),
    "openai:gpt-4.1-mini": _price("0.40", "1.60", "0.10", "0"),
    "openai:gpt-4.1-nano": _price("0.10", "0.40", "0.025", "0"),
    "openai:gpt-4o": _price("2.50", "10", "1.25", "0"),
    "openai:gpt-4o-mini": _price("0.15", "0.60", "0.075", "0"),
    "openai:o3": _price("2", "8", "0.50", "0"),
    "openai:o4-mini": _price("1.10", "4.40", "0.275", "0"),
}

# The names a provider gives a model's dated snapshot or alias beside its bundled name:
# `claude-sonnet-4-5-20250929`, `gpt-4o-2024-08-06`, `claude-3-7-sonnet-latest`.
_SNAPSHOT = re.compile(r"-(\d{8}|\d{4}-\d{2}-\d{2}|latest)")
_ALIASES = {
    "anthropic:claude-opus-4": "anthropic:claude-opus-4-0",
    "anthropic:claude-sonnet-4": "anthropic:claude-sonnet-4-0",
}


@dataclass(frozen=True, slots=True)
class ModelCost:
    """A model's cost in a ledger; None where it cannot be known (`unknown_because`)."""

    ledger: ModelLedger
    billed: Decimal | None  # the replies' usage at the model's price
    possibly_billed: Decimal | None  # the unanswered requests' estimated input
    unknown_because: str = ""  # "no price for …", "2 replies said no usage"


_FREE = _price("0", "0", "0", "0")


def price_of(model: str, prices: Mapping[str, Price]) -> Price | None:
    """The price of a model spec: its own entry, else the one its dated snapshot or alias
    name is of. None: unknown, so its cost is unknown (never 0). A scripted model is a
    local file that no one bills: free, a known price."""
    if model in prices:
        return prices[model]
    if model.startswith("scripted:"):
        return _FREE
    base = _SNAPSHOT.sub("", model) if _SNAPSHOT.search(model) else model
    base = _ALIASES.get(base, base)
    return prices.get(base)


def cost_of(entry: ModelLedger, prices: Mapping[str, Price]) -> ModelCost:
    price = price_of(entry.model, prices)
    if price is None:
        return ModelCost(entry, None, None, f"no price for {entry.model}")
    usage = entry.usage
    billed = (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_read_tokens * price.cache_read
        + usage.cache_write_tokens * price.cache_write
    ) / MILLION
    possibly = entry.possibly_billed_input * price.input / MILLION
    if entry.replies_without_usage:
        said = _replies(entry.replies_without_usage)
        return ModelCost(entry, None, possibly, f"{said} said no usage")
    return ModelCost(entry, billed, possibly)


def costs_of(ledger: Ledger, prices: Mapping[str, Price]) -> tuple[ModelCost, ...]:
    return tuple(cost_of(entry, prices) for entry in ledger)


def total_cost(costs: tuple[ModelCost, ...]) -> Decimal | None:
    """What the replies cost, every model's; None if any model's is unknown."""
    total = Decimal(0)
    for cost in costs:
        if cost.billed is None:
            return None
        total += cost.billed
    return total


def format_usd(amount: Decimal | None) -> str:
    """`$0.012345`, to the millionth of a dollar; "unknown" for None."""
    return "unknown" if amount is None else f"${amount.quantize(Decimal('0.000001'))}"


def price_table(overrides: object, source: str = "prices") -> dict[str, Price]:
    """The bundled table with `overrides` (noeta.yaml's `prices:`: model spec → {kind:
    USD per million}) laid over it. A kind an override leaves out keeps the bundled price;
    a model the table does not know needs every kind (a cache price left out would
    silently be 0). ConfigError names the first bad entry."""
    table = dict(BUNDLED)
    if overrides is None:
        return table
    if not isinstance(overrides, Mapping):
        raise ConfigError(f"{source}: a mapping of model spec to prices per kind")
    for model, given in overrides.items():
        if not isinstance(model, str) or ":" not in model:
            raise ConfigError(f"{source}: {model!r} is not a model spec (provider:model)")
        if not isinstance(given, Mapping):
            raise ConfigError(f"{source}: {model}: a mapping of token kind to USD per million")
        known = price_of(model, BUNDLED)
        values = {kind: getattr(known, kind) for kind in TOKEN_KINDS} if known else {}
        for kind, value in given.items():
            if kind not in TOKEN_KINDS:
                raise ConfigError(
                    f"{source}: {model}: unknown token kind {kind!r} "
                    f"(known: {', '.join(TOKEN_KINDS)})"
                )
            values[kind] = _amount(value, f"{source}: {model}: {kind}")
        missing = [kind for kind in TOKEN_KINDS if kind not in values]
        if missing:
            raise ConfigError(
                f"{source}: {model}: no bundled price, so every kind is needed; "
                f"missing {', '.join(missing)}"
            )
        table[model] = Price(**values)
    return table


def _amount(value: object, where: str) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(f"{where}: {value!r} is not a number (USD per million tokens)")
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        raise ConfigError(f"{where}: {value!r} is not a number (USD per million tokens)") from None
    if not amount.is_finite():
        raise ConfigError(f"{where}: {value!r} is not a number (USD per million tokens)")
    if amount < 0:
        raise ConfigError(f"{where}: {value} is negative; a price is 0 or more")
    return amount


def _replies(count: int) -> str:
    return "1 reply" if count == 1 else f"{count} replies"
