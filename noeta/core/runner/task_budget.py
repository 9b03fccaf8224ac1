"""A task's own budget (`--max-tokens`, `--max-cost`): before each model call, what the
log says was spent (the fold's running totals) plus the request's estimated input is
weighed against it; a call that would exceed it is not sent (ADR-0107).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from noeta.core.ports.fleet_budgets import FleetBudgetExceeded
from noeta.core.ports.model import Usage
from noeta.core.rules import events as ev
from noeta.core.rules.prices import BUNDLED, MILLION, Price, price_of
from noeta.core.rules.task_spend import UNKNOWN, budget_question
from noeta.core.rules.task_state import TaskState
from noeta.observability import metrics

# The prices a budget's cost is reckoned at: the worker's (noeta.yaml's `prices:` laid
# over the bundled table), set once at its start; the bundled table until then.
_prices: list[Mapping[str, Price]] = [BUNDLED]


def price_with(prices: Mapping[str, Price]) -> None:
    """The process's prices (noeta.yaml's `prices:` over the bundled table), for every
    use it has: the tasks' --max-cost, the fleet budgets' costs and the cost counter.
    The worker and `noeta run` both call this, so they price alike."""
    _prices[0] = prices
    metrics.price_with(prices)


def refusal(state: TaskState, estimate: int) -> ev.BudgetExceeded | None:
    """The refusal of a call whose request is estimated at `estimate` input tokens, or
    None if the budget allows it (or the task has none). The estimate is of the input
    only: a call may overshoot by its output and its input beyond the estimate."""
    config = state.config
    if config is None or not config.has_budget or state.budget_allowed:
        return None  # none, or a person allowed this call past it
    if config.budget_tokens:
        spent = tokens_spent(state)
        if spent + estimate > config.budget_tokens:
            return ev.BudgetExceeded("tokens", str(spent), estimate, str(config.budget_tokens))
    if config.budget_cost:
        billed = cost_spent(state)
        price = price_of(config.model, _prices[0])
        if billed is None or price is None:  # unknown cost is never taken as 0
            return ev.BudgetExceeded("cost", "unknown", estimate, config.budget_cost)
        if billed + estimate * price.input / MILLION > Decimal(config.budget_cost):
            return ev.BudgetExceeded("cost", _usd(billed), estimate, config.budget_cost)
    return None


def tokens_spent(state: TaskState) -> int:
    """The tokens the task's calls spent, and those its budgeted subtasks reported."""
    return sum(state.spent) + state.subtask_tokens


def cost_spent(state: TaskState) -> Decimal | None:
    """What the task's calls cost at the worker's prices, and what its budgeted subtasks
    reported; None where either is unknown."""
    config = state.config
    price = None if config is None else price_of(config.model, _prices[0])
    if price is None or state.subtask_cost == UNKNOWN:
        return None
    input_tokens, output, cache_read, cache_write, unanswered = state.spent
    own = (
        input_tokens * price.input
        + output * price.output
        + cache_read * price.cache_read
        + cache_write * price.cache_write
        + unanswered * price.input
    ) / MILLION
    return own + Decimal(state.subtask_cost or "0")


def child_budget(state: TaskState) -> dict[str, object]:
    """A subtask's budget: what its parent has left now (ADR-0107), and its policy; {} for
    a parent with none. A parent with nothing left (it passed its budget by its last
    call's worth) gives the least there is, so its child's first call is refused."""
    config = state.config
    if config is None or not config.has_budget:
        return {}
    budget: dict[str, object] = {"on_budget": config.on_budget}
    if config.budget_tokens:
        budget["budget_tokens"] = max(1, config.budget_tokens - tokens_spent(state))
    if config.budget_cost:
        billed = cost_spent(state)
        left = Decimal(config.budget_cost) - billed if billed is not None else Decimal(0)
        budget["budget_cost"] = _usd(max(left, LEAST_USD))
    return budget


def tree_spend(state: TaskState) -> tuple[int, str]:
    """What a budgeted subtask reports with its handback: its tree's tokens and cost
    ("unknown" where a price is missing); (0, "") for a task with no budget."""
    config = state.config
    if config is None or not config.has_budget:
        return 0, ""
    cost = cost_spent(state)
    return tokens_spent(state), UNKNOWN if cost is None else _usd(cost)


def input_cost(model: str, tokens: int) -> Decimal | None:
    """What `tokens` of input cost at the worker's prices; None: the model has no price."""
    price = price_of(model, _prices[0])
    return None if price is None else tokens * price.input / MILLION


def usage_cost(model: str, usage: Usage) -> Decimal | None:
    """What a reply's usage cost at the worker's prices; None: the model has no price."""
    price = price_of(model, _prices[0])
    if price is None:
        return None
    return (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_read_tokens * price.cache_read
        + usage.cache_write_tokens * price.cache_write
    ) / MILLION


def fleet_refusal(exceeded: FleetBudgetExceeded, estimate: int) -> ev.BudgetExceeded:
    """The refusal a fleet budget answered, as the log records it."""
    budget = exceeded.budget
    spent = "unknown" if exceeded.spent is None else _usd(exceeded.spent)
    fleet = f"{budget.scope} --per-{budget.period}"
    return ev.BudgetExceeded("fleet", spent, estimate, str(budget.amount), fleet)


def error_of(refused: ev.BudgetExceeded) -> str:
    """The task's error: its kind, and the budget it names."""
    return f"budget_exceeded: {budget_question(refused)}"


LEAST_USD = Decimal("0.000001")


def _usd(amount: Decimal) -> str:
    return str(amount.quantize(Decimal("0.000001")))
