"""Fleet budgets (issue 32, ADR-0110): the USD a queue, or one concurrency key of it, may
spend on model calls per calendar hour, day or month (UTC), whatever worker makes them.

A store with model limits keeps them beside the limits (`ModelLimiter`): the append that
records `ModelCalled` takes the call's estimated cost, or refuses it
(`FleetBudgetExceeded`: nothing written, the claim kept); the reply's real cost corrects
the estimate afterwards. These are the values and the rules both stores follow.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation

from noeta.core.errors import ConfigError, NoetaError
from noeta.core.ports.store_values import check_key
from noeta.core.rules.task_id import check_concurrency_key

# Calendar periods in UTC: what a bill and a provider's own spend limits count by, so
# "20.00 a day" means the same to the operator and to the budget. A rolling window would
# need every call's time kept; a calendar period needs one sum and its start.
PERIODS = ("hour", "day", "month")
MAX_AMOUNT = Decimal(1_000_000_000)
CENT = Decimal("0.01")


@dataclass(frozen=True, slots=True)
class FleetBudget:
    """A budget's settings and what its current period has spent (`noeta budget list`)."""

    queue: str
    concurrency_key: str  # "" the whole queue
    period: str  # one of PERIODS
    amount: Decimal
    spent: Decimal = Decimal(0)  # in the period that started at `period_start`
    period_start: datetime | None = None  # None: nothing spent yet, or in an older period
    calls: int = 0
    refusals: int = 0

    @property
    def scope(self) -> str:
        return scope_name(self.queue, self.concurrency_key)

    @property
    def name(self) -> str:
        """`research/acme --per-day 20.00`: how the refusal and the list name it."""
        return f"{self.scope} --per-{self.period} {self.amount:.2f}"


class FleetBudgetExceeded(NoetaError):
    """The ModelCalled append was refused by a fleet budget: nothing of it was written and
    the claim is as it was; the runner records the refusal (`BudgetExceeded`). `spent` is
    None where the call's cost is unknown (its model has no price)."""

    def __init__(self, task_id: str, budget: FleetBudget, spent: Decimal | None) -> None:
        said = "unknown cost (no price)" if spent is None else f"${spent} spent"
        super().__init__(f"fleet budget {budget.name}: {said}")
        self.task_id = task_id
        self.budget = budget
        self.spent = spent


BUDGET_HEADINGS = ("budget", "period", "amount", "spent", "calls", "refused")


def budget_cells(each: FleetBudget, now: datetime) -> tuple[str, ...]:
    """A budget's row as `noeta budget list` shows it (BUDGET_HEADINGS): its spend is the
    current period's (an older period's is 0)."""
    return (
        each.scope,
        each.period,
        f"${each.amount}",
        f"${current_spend(each, now).quantize(Decimal('0.000001'))}",
        f"{each.calls:,}",
        f"{each.refusals:,}",
    )


def current_spend(each: FleetBudget, now: datetime) -> Decimal:
    """What the period `now` is in has spent."""
    if each.period_start is None or each.period_start != period_start(each.period, now):
        return Decimal(0)
    return each.spent


def period_start(period: str, moment: datetime) -> datetime:
    """The start of the calendar period (UTC) `moment` is in, as PostgreSQL's
    `date_trunc(period, moment, 'UTC')` says it."""
    from datetime import UTC

    at = moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    if period == "hour":
        return at
    at = at.replace(hour=0)
    return at if period == "day" else at.replace(day=1)


def scope_name(queue: str, concurrency_key: str) -> str:
    return f"{queue}/{concurrency_key}" if concurrency_key else queue


def check_scope(scope: str) -> tuple[str, str]:
    """`QUEUE` or `QUEUE/KEY` (split at the last `/`: a key has none) as (queue, key),
    or ConfigError."""
    queue, slash, key = scope.rpartition("/")
    if not slash:
        queue, key = scope, ""
    elif not key:
        raise ConfigError(f"bad budget {scope!r}: nothing after the / (QUEUE or QUEUE/KEY)")
    try:
        check_key("queue name", queue)
        if key:
            check_concurrency_key(key)
    except NoetaError as error:
        raise ConfigError(f"bad budget {scope!r}: {error}") from None
    return queue, key


def check_period(period: str) -> str:
    if period not in PERIODS:
        raise ConfigError(f"bad period {period!r}: use one of {', '.join(PERIODS)}")
    return period


def check_amount(text: str, option: str) -> Decimal:
    """USD, more than 0, to the cent at most finer (a budget of $0.001 is a typo)."""
    try:
        amount = Decimal(text.strip())
    except InvalidOperation:
        raise ConfigError(f"{option} {text!r} is not an amount of USD (like 20.00)") from None
    if not amount.is_finite():
        raise ConfigError(f"{option} {text!r} is not an amount of USD (like 20.00)")
    if amount <= 0:
        raise ConfigError(f"{option} must be more than 0, not {text}")
    if amount > MAX_AMOUNT:
        raise ConfigError(f"{option} must be at most {MAX_AMOUNT:,}, not {text}")
    if amount != amount.quantize(CENT):
        raise ConfigError(f"{option} {text} has fractions of a cent; give USD to the cent")
    return amount.quantize(CENT)
