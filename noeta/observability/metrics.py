"""Metrics: what noeta counts and times (claims, conflicts, commit-unknowns, takeovers, lost
background jobs, model and tool calls, queue depth, running per queue and key, waiting
for a slot), handed to the installed instruments.

Every function is a no-op until `noeta.observability.instruments` installs a sink. This
module imports no opentelemetry: the kernel reaches it (ADR-0024). Errors are counted on
the duration histograms: each failed call carries `error.type`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Protocol

from noeta.core.errors import StoreError
from noeta.observability import names

if TYPE_CHECKING:
    from noeta.core.ports.model import Usage
    from noeta.core.ports.model_limits import ModelLimit
    from noeta.core.ports.store import Store
    from noeta.core.rules.prices import Price

# Seconds between the worker's queue-depth readings (one cheap statement each).
QUEUE_DEPTH_SECONDS = 15.0

# Instrument names: counters, histograms and the gauge the instruments define.
CLAIMS = "noeta.claims"
TAKEOVERS = "noeta.takeovers"
CONFLICTS = "noeta.conflicts"
COMMIT_UNKNOWNS = "noeta.commit_unknowns"
JOBS_LOST = "noeta.jobs.lost"
MODEL_THROTTLED = "noeta.model.throttled"
MODEL_BUDGET_WAIT = "noeta.model.budget_wait"
MODEL_BUDGET_REFUSED = "noeta.model.budget_refused"
MODEL_DURATION = "gen_ai.client.operation.duration"
TOKEN_USAGE = "gen_ai.client.token.usage"
MODEL_COST = "noeta.model.cost"  # USD, at the worker's prices (noeta.yaml's `prices:`)
TOOL_DURATION = "noeta.tool.duration"
QUEUE_DEPTH = "noeta.queue.depth"
QUEUE_RUNNING = "noeta.queue.running"  # live claims, per queue (and per busiest key)
QUEUE_WAITING_FOR_SLOT = "noeta.queue.waiting_for_slot"  # claimable, held back by a limit

Attributes = Mapping[str, str | bool]


class MetricSink(Protocol):
    """Where readings go once metrics are on (`instruments.Instruments`)."""

    def add(self, counter: str, amount: float, attributes: Attributes) -> None: ...

    def record(self, histogram: str, value: float, attributes: Attributes) -> None: ...

    def set_queue_depth(self, depth: Mapping[str, int]) -> None: ...

    def set_queue_load(
        self, running: Mapping[tuple[str, str | None], int], waiting: Mapping[str, int]
    ) -> None: ...

    def shutdown(self) -> None: ...

    def set_model_limits(self, limits: Sequence[ModelLimit]) -> None: ...


class _Switch:
    sink: MetricSink | None = None  # set while metrics are on
    prices: Mapping[str, Price] | None = None  # the cost counter's; None: no cost counted
    # False when metrics are only scraped (`--health`, no OTLP): a scrape reads the store.
    timed: bool = True


_on = _Switch()


def enabled() -> bool:
    return _on.sink is not None


def switch_on(sink: MetricSink, *, timed: bool = True) -> None:
    _on.sink, _on.timed = sink, timed


def read_on_a_timer() -> bool:
    """Whether a worker reads the queue gauges every QUEUE_DEPTH_SECONDS (metrics are
    pushed); scraped only, they are read at each scrape instead."""
    return _on.sink is not None and _on.timed


def price_with(prices: Mapping[str, Price]) -> None:
    """The price table the cost counter uses (the worker's config's)."""
    _on.prices = prices


def uninstall() -> None:
    _on.sink = None
    _on.prices = None


def shutdown() -> None:
    if (sink := _on.sink) is not None:
        sink.shutdown()


def claimed(taken_over: bool) -> None:
    if (sink := _on.sink) is not None:
        sink.add(CLAIMS, 1, {names.TAKEN_OVER: taken_over})
        if taken_over:
            sink.add(TAKEOVERS, 1, {})


def conflict(operation: str) -> None:
    if (sink := _on.sink) is not None:
        sink.add(CONFLICTS, 1, {names.STORE_OPERATION: operation})


def commit_unknown(operation: str) -> None:
    if (sink := _on.sink) is not None:
        sink.add(COMMIT_UNKNOWNS, 1, {names.STORE_OPERATION: operation})


def job_lost() -> None:
    if (sink := _on.sink) is not None:
        sink.add(JOBS_LOST, 1, {})


def _chat(provider: str, model: str) -> dict[str, str | bool]:
    return {names.OPERATION: "chat", names.PROVIDER: provider, names.REQUEST_MODEL: model}


def model_call(seconds: float, provider: str, model: str, error_type: str) -> None:
    if (sink := _on.sink) is not None:
        attributes = _chat(provider, model)
        if error_type:
            attributes[names.ERROR_TYPE] = error_type
        sink.record(MODEL_DURATION, seconds, attributes)


def replied(provider: str, model: str, usage: Usage | None) -> None:
    """A reply's tokens, as the GenAI conventions count them (billable input, cached
    included, and output), and its cost where the model has a price. A reply that said no
    usage records nothing: unknown, never 0."""
    if (sink := _on.sink) is None or usage is None:
        return
    base = _chat(provider, model)
    sink.record(TOKEN_USAGE, usage.all_input_tokens, {**base, names.TOKEN_TYPE: "input"})
    sink.record(TOKEN_USAGE, usage.output_tokens, {**base, names.TOKEN_TYPE: "output"})
    if _on.prices is not None:
        cost = _cost(f"{provider}:{model}", usage, _on.prices)
        if cost is not None:
            sink.add(MODEL_COST, float(cost), base)


def _cost(spec: str, usage: Usage, prices: Mapping[str, Price]) -> Decimal | None:
    from noeta.core.rules.ledger import ModelLedger
    from noeta.core.rules.prices import cost_of

    return cost_of(ModelLedger(spec, replies=1, usage=usage), prices).billed


def model_throttled(provider: str, model: str) -> None:
    """A provider answered a model call 429 (too many requests)."""
    if (sink := _on.sink) is not None:
        sink.add(MODEL_THROTTLED, 1, _chat(provider, model))


def model_budget_wait(provider: str, model: str, limit: str, seconds: float) -> None:
    """A task was handed back to wait `seconds` for a shared limit's budget."""
    if (sink := _on.sink) is not None:
        attributes = {**_chat(provider, model), names.MODEL_LIMIT: limit}
        sink.record(MODEL_BUDGET_WAIT, seconds, attributes)


def model_budget_refused(provider: str, model: str, budget: str, fleet: str) -> None:
    """A model call a budget refused, recorded and not sent: `budget` is "tokens" or
    "cost" (the task's own) or "fleet" (`fleet` names it, ADR-0110)."""
    if (sink := _on.sink) is not None:
        attributes = {**_chat(provider, model), names.BUDGET: budget}
        if fleet:
            attributes[names.FLEET_BUDGET] = fleet
        sink.add(MODEL_BUDGET_REFUSED, 1, attributes)


def tool_call(seconds: float, name: str, error_type: str) -> None:
    if (sink := _on.sink) is not None:
        attributes: dict[str, str | bool] = {
            names.OPERATION: "execute_tool",
            names.TOOL_NAME: name,
        }
        if error_type:
            attributes[names.ERROR_TYPE] = error_type
        sink.record(TOOL_DURATION, seconds, attributes)


async def measure_queue_depth_on_a_timer(store: Store, queues: Sequence[str]) -> None:
    """A worker's queue depth for the metric: one cheap count now and then, only if
    exported (off, or only scraped: a scrape reads it)."""
    if not read_on_a_timer():
        return
    while True:
        with contextlib.suppress(StoreError):
            await measure_queue_depth(store, queues)
        await asyncio.sleep(QUEUE_DEPTH_SECONDS)


async def measure_queue_depth(store: Store, queues: Sequence[str]) -> None:
    """One reading of the worker's queues: the store's count of claimable tasks in each,
    0 for a queue it has no row for (an empty queue reads 0, not its last count)."""
    if (sink := _on.sink) is not None:
        counts = await store.queue_depth(queues)
        sink.set_queue_depth({queue: counts.get(queue, 0) for queue in queues})
        await _measure_queue_load(sink, store, queues)


async def _measure_queue_load(sink: MetricSink, store: Store, queues: Sequence[str]) -> None:
    """Live claims per queue (and per busiest concurrency key, ADR-0073) and the tasks a
    limit holds back, from the store's queue overview; 0 for a queue it does not list."""
    settings = store.capabilities.queue_settings
    if settings is None:
        return
    found = {o.queue: o for o in await settings.queue_overview(queues)}
    running: dict[tuple[str, str | None], int] = {}
    waiting: dict[str, int] = {}
    for queue in queues:
        overview = found.get(queue)
        running[(queue, None)] = overview.running if overview else 0
        waiting[queue] = overview.waiting_for_slot if overview else 0
        for key, count in overview.running_by_key.items() if overview else ():
            running[(queue, key)] = count
    sink.set_queue_load(running, waiting)


# The shared model limits, read from the store at a Prometheus scrape (per limit key: a
# few, each set by an operator with `noeta limit set`).
MODEL_LIMIT_CALLS = "noeta.model_limit.calls"
MODEL_LIMIT_HANDBACKS = "noeta.model_limit.handbacks"
MODEL_LIMIT_THROTTLED = "noeta.model_limit.throttled"
MODEL_LIMIT_PAUSED = "noeta.model_limit.paused"


async def measure_model_limits(store: Store) -> None:
    """One reading of the shared model limits' counts, where the store keeps limits."""
    limiter = store.capabilities.model_limits
    if (sink := _on.sink) is not None and limiter is not None:
        sink.set_model_limits(await limiter.model_limits())
