"""A task's own budget (`--max-tokens`, `--max-cost`): before each model call, what the
log says was spent (the fold's running totals) plus the request's estimated input is
weighed against it; a call that would exceed it is not sent (ADR-0107).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from noeta.core.rules import events as ev
from noeta.core.rules.prices import BUNDLED, MILLION, Price, price_of
from noeta.core.rules.task_spend import budget_question
from noeta.core.rules.task_state import TaskState

# The prices a budget's cost is reckoned at: the worker's (noeta.yaml's `prices:` laid
# over the bundled table), set once at its start; the bundled table until then.
_prices: list[Mapping[str, Price]] = [BUNDLED]


def price_with(prices: Mapping[str, Price]) -> None:
    _prices[0] = prices


def refusal(state: TaskState, estimate: int) -> ev.BudgetExceeded | None:
    """The refusal of a call whose request is estimated at `estimate` input tokens, or
    None if the budget allows it (or the task has none). The estimate is of the input
    only: a call may overshoot by its output and its input beyond the estimate."""
    config = state.config
    if config is None or not config.has_budget or state.budget_allowed:
        return None  # none, or a person allowed this call past it
    input_tokens, output, cache_read, cache_write, unanswered = state.spent
    if config.budget_tokens:
        spent = input_tokens + output + cache_read + cache_write + unanswered
        if spent + estimate > config.budget_tokens:
            return ev.BudgetExceeded("tokens", str(spent), estimate, str(config.budget_tokens))
    if config.budget_cost:
        price = price_of(config.model, _prices[0])
        if price is None:  # unknown cost is never taken as 0
            return ev.BudgetExceeded("cost", "unknown", estimate, config.budget_cost)
        billed = (
            input_tokens * price.input
            + output * price.output
            + cache_read * price.cache_read
            + cache_write * price.cache_write
            + unanswered * price.input
        ) / MILLION
        if billed + estimate * price.input / MILLION > Decimal(config.budget_cost):
            return ev.BudgetExceeded("cost", _usd(billed), estimate, config.budget_cost)
    return None


def error_of(refused: ev.BudgetExceeded) -> str:
    """The task's error: its kind, and the budget it names."""
    return f"budget_exceeded: {budget_question(refused)}"


def _usd(amount: Decimal) -> str:
    return str(amount.quantize(Decimal("0.000001")))
