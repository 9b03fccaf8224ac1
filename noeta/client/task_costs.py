"""What a task cost: the ledger (noeta.core.rules.ledger) of its log and its subtasks'
logs, priced by the config's table: the client's `usage()`, and what `noeta show` and
`noeta tasks --cost` print."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

from noeta.core.ports.model import Usage
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.store import Store
from noeta.core.rules import events
from noeta.core.rules.fold import LoggedEvent
from noeta.core.rules.ledger import Ledger, combined, ledger_of
from noeta.core.rules.prices import ModelCost, Price, costs_of, format_usd, total_cost


@dataclass(frozen=True, slots=True)
class TaskUsage:
    """A task's usage and cost, its subtasks' included (a fork's from its fork point)."""

    task_id: str
    costs: tuple[ModelCost, ...]  # per model

    @property
    def usage(self) -> Usage:
        """The tokens the replies said they used (not the replies that said none)."""
        total = Usage()
        for cost in self.costs:
            total = total.plus(cost.ledger.usage)
        return total

    @property
    def cost(self) -> Decimal | None:
        """USD the replies cost; None (unknown, never 0) if a model has no price or a reply
        said no usage. Not counting what is only possibly billed."""
        return total_cost(self.costs)

    @property
    def possibly_billed(self) -> int:
        """Requests sent whose reply never came: they may have been billed."""
        return sum(cost.ledger.possibly_billed for cost in self.costs)

    @property
    def possibly_billed_cost(self) -> Decimal | None:
        """What those requests' estimated input tokens cost; None if a price is unknown."""
        total = Decimal(0)
        for cost in self.costs:
            if cost.ledger.possibly_billed and cost.possibly_billed is None:
                return None
            total += cost.possibly_billed or 0
        return total


async def tree_ledger(store: Store, task_id: str) -> Ledger:
    """The ledger of the task and every subtask under it, each log read once."""
    ledgers: list[Ledger] = []
    pending, seen = [task_id], set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        log = [LoggedEvent(s.seq, _decoded(s.type, s.data)) for s in await store.read_log(current)]
        ledgers.append(ledger_of(log))
        pending.extend(e.event.child_id for e in log if isinstance(e.event, events.SubtaskLaunched))
    return combined(ledgers)


async def task_usage(store: Store, task_id: str, prices: Mapping[str, Price]) -> TaskUsage:
    return TaskUsage(task_id, costs_of(await tree_ledger(store, task_id), prices))


def summary_lines(usage: TaskUsage) -> list[str]:
    """`noeta show`'s usage and cost summary: the total, then a line per model."""
    lines = []
    for cost in usage.costs:
        entry, tokens = cost.ledger, cost.ledger.usage
        said = (
            f"  {entry.model}: {counted(entry.replies, 'reply', 'replies')}, "
            f"in {tokens.input_tokens:,} "
            f"cache read {tokens.cache_read_tokens:,} cache write {tokens.cache_write_tokens:,} "
            f"out {tokens.output_tokens:,}"
        )
        if tokens.reasoning_tokens:
            said += f" (reasoning {tokens.reasoning_tokens:,})"
        said += f"  {format_usd(cost.billed)}"
        if cost.unknown_because:
            said += f" ({cost.unknown_because})"
        if entry.possibly_billed:
            said += (
                f"; possibly billed: {counted(entry.possibly_billed, 'request', 'requests')} "
                "with no reply, "
                f"~{entry.possibly_billed_input:,} input tokens, "
                f"{format_usd(cost.possibly_billed)}"
            )
            if entry.possibly_billed_unestimated:
                said += f" ({entry.possibly_billed_unestimated} not estimated)"
        lines.append(said)
    total = f"cost {format_usd(usage.cost)}"
    if usage.possibly_billed:
        total += f" + possibly billed {format_usd(usage.possibly_billed_cost)}"
    return [f"usage (with subtasks): {total}", *lines] if lines else ["usage: no model calls"]


def counted(number: int, one: str, many: str) -> str:
    return f"{number} {one if number == 1 else many}"


def usage_json(usage: TaskUsage) -> dict[str, JSONValue]:
    """`noeta show --json`'s usage: amounts as decimal strings (exact), null if unknown."""
    return {
        "cost_usd": _amount(usage.cost),
        "possibly_billed": usage.possibly_billed,
        "possibly_billed_usd": _amount(usage.possibly_billed_cost),
        "models": [
            {
                "model": cost.ledger.model,
                "replies": cost.ledger.replies,
                "replies_without_usage": cost.ledger.replies_without_usage,
                **{name: getattr(cost.ledger.usage, name) for name in _USAGE_FIELDS},
                "cost_usd": _amount(cost.billed),
                "unknown_because": cost.unknown_because,
                "possibly_billed": cost.ledger.possibly_billed,
                "possibly_billed_input_tokens": cost.ledger.possibly_billed_input,
                "possibly_billed_usd": _amount(cost.possibly_billed),
            }
            for cost in usage.costs
        ],
    }


_USAGE_FIELDS = tuple(Usage.__dataclass_fields__)


def _amount(amount: Decimal | None) -> str | None:
    return None if amount is None else str(amount)


def _decoded(event_type: str, data: object) -> events.Event | events.UnknownEvent:
    try:
        return events.decode(event_type, data)  # type: ignore[arg-type]
    except ValueError:
        return events.UnknownEvent(event_type, 0)  # unreadable: it counts for nothing
