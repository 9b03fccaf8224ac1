"""Shared model-call limits (ADR-0075): the `ModelLimiter` port a store offers beside
`Store`, its values, and the rules both stores follow (keys, the token estimate).

A limit is kept per `provider/model` or `provider/*`; every worker counts against the same
row. The budget is taken by the append that records `ModelCalled`, after its fence: a call
is counted exactly when it is recorded. A call the budget does not allow is not recorded:
the append hands the task back, due when the budget allows (`ModelBudgetWait`), or,
for a task whose background jobs need its claim, keeps it (`ModelBudgetHeld`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Protocol, runtime_checkable

from noeta.core.errors import ConfigError, NoetaError, StoreError
from noeta.core.ports.fleet_budgets import FleetBudget
from noeta.core.ports.store_values import Claim, NewEvent

# The largest limit a user can set: far above any provider's, small enough for an int4.
MAX_LIMIT = 1_000_000_000
MAX_MODEL_CHARS = 200
ANY_MODEL = "*"
# Characters per token of the request's bytes, for the estimate taken before the call
# (the reply's real usage corrects it afterwards). 4 is the providers' own rule of thumb.
CHARS_PER_TOKEN = 4

_PROVIDER = re.compile(r"[a-z][a-z0-9_-]{0,63}")
_MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/+-]*")


@dataclass(frozen=True, slots=True)
class ModelLimit:
    """A limit's settings and what it has counted (`noeta limit list`)."""

    key: str
    rpm: int | None
    tpm: int | None
    paused_until: datetime | None = None
    calls: int = 0  # model calls the limit let through
    handbacks: int = 0  # tasks handed back to wait for this limit's budget
    waited_seconds: float = 0.0  # the sum of those waits
    throttled: int = 0  # 429s the provider answered calls under this limit


LIMIT_HEADINGS = ("limit", "rpm", "tpm", "calls", "waits", "waited", "429s", "paused until")


def limit_cells(each: ModelLimit) -> tuple[str, ...]:
    """A limit's row as `noeta limit list` and the limits page show it (LIMIT_HEADINGS)."""
    paused = each.paused_until.astimezone(UTC).strftime("%H:%M:%S") if each.paused_until else ""
    return (
        each.key,
        f"{each.rpm:,}" if each.rpm else "-",
        f"{each.tpm:,}" if each.tpm else "-",
        f"{each.calls:,}",
        f"{each.handbacks:,}",
        f"{each.waited_seconds:,.1f} s",
        f"{each.throttled:,}",
        paused,
    )


@dataclass(slots=True)
class BudgetTaken:
    """What the append that took a budget found. Until an append says no limit applied,
    one may have: the reply's real tokens are then sent to correct the estimate."""

    by_a_limit: bool = True
    # When a fleet budget took the call's estimated cost (ADR-0110); None: none did, and
    # the reply's real cost is sent nowhere.
    by_a_budget_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class ModelBudget:
    """What a model call takes of the limits: one call and an estimate of its tokens, from
    every limit whose key is one of `keys` (most specific first)."""

    keys: tuple[str, ...]
    tokens: int
    # The task's background jobs run under its claim: a refusal must not end it (that
    # would stop them). It keeps the claim, holds the slot, and raises ModelBudgetHeld.
    keep_claim: bool = False
    # The request's estimated cost in USD (its estimated input at its model's input
    # price), taken by a fleet budget that applies; None: the model has no price, and a
    # fleet budget refuses a call of unknown cost (ADR-0110).
    cost: Decimal | None = Decimal(0)
    # Set by the append: with no limit on the call, no correction is sent (issue 28).
    taken: BudgetTaken = field(default_factory=BudgetTaken, compare=False)


class ModelBudgetWait(StoreError):
    """The append was refused for a limit's budget: nothing of it was written, and the
    task was handed back, claimable again at `until` (the claim is over)."""

    def __init__(self, task_id: str, limit: str, until: datetime) -> None:
        super().__init__(f"waiting for model budget {limit} until {until.isoformat()}")
        self.task_id = task_id
        self.limit = limit
        self.until = until


class ModelBudgetHeld(NoetaError):
    """The append was refused for a limit's budget, but the claim was kept (the budget
    `keep_claim`): nothing was written, the slot at `until` is reserved for this task,
    and the same claim appends again once it has come."""

    def __init__(self, task_id: str, limit: str, until: datetime) -> None:
        super().__init__(f"waiting for model budget {limit} until {until.isoformat()}")
        self.task_id = task_id
        self.limit = limit
        self.until = until


@runtime_checkable
class ModelLimiter(Protocol):
    """The limits' store: a store that has them implements this beside `Store`."""

    async def append_model_called(
        self, claim: Claim, expected_seq: int, events: Sequence[NewEvent], budget: ModelBudget
    ) -> int:
        """Append `events` (one holding `ModelCalled`) as `Store.append` with nothing else
        does, and take `budget` in the same transaction, after the fence. Raises
        `ModelBudgetWait` when a limit does not allow the call now (or is paused): then
        nothing is appended and the task is ready again at the moment the budget allows,
        which is reserved for it (its next attempt takes it without waiting again). With
        `budget.keep_claim`, a refusal raises `ModelBudgetHeld` instead and leaves the
        claim as it was (running, its lease), the moment reserved all the same. Sets
        `budget.taken.by_a_limit` to whether any limit applied.

        Before the limits, the fleet budgets of the task's queue and concurrency key: one
        that `budget.cost` would take past its period's amount (or any, when the cost is
        unknown) raises `FleetBudgetExceeded`, writing nothing and leaving the claim and
        the limits as they were; else the call's cost is added to each, and
        `budget.taken.by_a_budget_at` set to the moment it was charged."""
        ...

    async def fleet_budget_used(self, task_id: str, budget: ModelBudget, cost: Decimal) -> None:
        """Correct the cost a fleet budget took at the call (the estimate) by the reply's
        real cost, in the period it was charged in (none, once that period is over).
        Called only where the append charged one (`budget.taken.by_a_budget_at`)."""
        ...

    async def set_fleet_budget(self, budget: FleetBudget) -> bool:
        """Create or change a budget (its spend stays); whether its queue is known to the
        store (a task or settings name it): a budget may be set before its queue exists."""
        ...

    async def clear_fleet_budget(self, queue: str, concurrency_key: str) -> int:
        """Remove the budgets of a queue (or of one key of it), every period; how many."""
        ...

    async def fleet_budgets(self) -> list[FleetBudget]:
        """Every fleet budget, by queue, key and period."""
        ...

    async def model_call_used(self, budget: ModelBudget, tokens: int) -> None:
        """Correct the tokens taken at the call (the estimate) by the reply's real use.
        Called only where the append found a limit on the call (`budget.taken`)."""
        ...

    async def model_call_throttled(self, keys: Sequence[str], retry_after: float | None) -> None:
        """Count a 429; with a Retry-After, pause these limits for every worker until then."""
        ...

    async def set_model_limit(self, key: str, rpm: int | None, tpm: int | None) -> None:
        """Create or change a limit; what it has counted stays."""
        ...

    async def clear_model_limit(self, key: str) -> bool:
        """Remove a limit; False if there was none."""
        ...

    async def model_limits(self) -> list[ModelLimit]:
        """Every limit, by key."""
        ...


def limit_keys(provider: str, model: str) -> tuple[str, ...]:
    """The keys whose limits a call to `model` of `provider` counts against."""
    return (f"{provider}/{model}", f"{provider}/{ANY_MODEL}")


def estimate_tokens(body: bytes) -> int:
    """The tokens a request is taken for before it is sent: its size over CHARS_PER_TOKEN."""
    return -(-len(body) // CHARS_PER_TOKEN)


def check_limit_key(key: str) -> str:
    """`provider/model` or `provider/*` (a bare `provider` means `provider/*`), or
    ConfigError naming the rule."""
    provider, slash, model = key.partition("/")
    model = model if slash else ANY_MODEL
    if not _PROVIDER.fullmatch(provider):
        raise ConfigError(
            f"bad limit {key!r}: the provider must be lowercase letters, digits, - or _"
        )
    if model != ANY_MODEL and not (len(model) <= MAX_MODEL_CHARS and _MODEL.fullmatch(model)):
        raise ConfigError(
            f"bad limit {key!r}: the model must be * or a model name "
            f"(letters, digits, . _ : @ / + -, at most {MAX_MODEL_CHARS})"
        )
    return f"{provider}/{model}"


def check_limit(key: str, rpm: int | None, tpm: int | None) -> tuple[str, int | None, int | None]:
    """A limit's settings checked: its key (normalised) and at least one per-minute rate,
    each 1 to MAX_LIMIT; else ConfigError naming the rule."""
    key = check_limit_key(key)
    if rpm is None and tpm is None:
        raise ConfigError(f"limit {key}: give --rpm, --tpm or both")
    for name, value in (("--rpm", rpm), ("--tpm", tpm)):
        if value is not None and not 1 <= value <= MAX_LIMIT:
            raise ConfigError(f"{name} must be between 1 and {MAX_LIMIT:,}, not {value}")
    return key, rpm, tpm
