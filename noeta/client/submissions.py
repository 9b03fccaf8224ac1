"""What `submit` and `submit_many` create: a `Submission` checked into the agent task it
becomes (a prompt, a queue, an id, a model spec of a known form, its tools).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from typing import TypedDict

from noeta.core.errors import ConfigError, PayloadError
from noeta.core.ports.store import DEFAULT_PRIORITY, DEFAULT_QUEUE, NewEvent, NewTask, check_key
from noeta.core.ports.store_values import check_text
from noeta.core.rules import events
from noeta.core.rules.task_id import check_task_id

# Without a model given (or NOETA_MODEL for the CLI): the model a task is given.
DEFAULT_MODEL = "anthropic:claude-sonnet-4-5"


@dataclass(frozen=True, slots=True)
class Submission:
    """One task of a `submit_many` batch: `submit`'s arguments; None takes the batch's."""

    prompt: str = ""
    model: str | None = None
    queue: str | None = None
    id: str | None = None
    interactive: bool = False
    tools: Sequence[str] | None = None  # None: every tool of its worker's plugins
    key: str | None = None  # its concurrency key (a tenant), as `submit`'s
    priority: int | None = None
    # Its budget (ADR-0107): USD (a decimal string, or a Decimal), and tokens of every
    # kind, over the task's model calls; `on_budget` "fail" or "ask". None: no budget.
    max_cost: str | Decimal | None = None
    max_tokens: int | None = None
    on_budget: str = "fail"


BUDGET_POLICIES = ("fail", "ask")


class BudgetOptions(TypedDict, total=False):
    """A task's budget over its model calls (ADR-0107): `max_cost` in USD (a decimal
    string or a Decimal), `max_tokens` of every kind; when the next call would pass it,
    `on_budget` "fail" (the default: the task fails, `budget_exceeded`) or "ask"."""

    max_cost: str | Decimal | None
    max_tokens: int | None
    on_budget: str


def checked_budget(
    max_cost: str | Decimal | None, max_tokens: int | None, on_budget: str
) -> dict[str, object]:
    """A budget's TaskCreated fields; ConfigError for a cost or a token count that is not
    a positive number, or an unknown policy."""
    fields: dict[str, object] = {}
    if max_cost is not None:
        try:
            cost = Decimal(str(max_cost).strip())
        except InvalidOperation:
            raise ConfigError(f"max cost {str(max_cost)!r} is not a number (USD)") from None
        if not cost.is_finite() or cost <= 0:
            raise ConfigError(f"max cost must be more than 0 USD, not {str(max_cost)!r}")
        fields["budget_cost"] = str(cost)
    if max_tokens is not None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= 0:
            raise ConfigError(f"max tokens must be a whole number above 0, not {max_tokens!r}")
        fields["budget_tokens"] = max_tokens
    if on_budget not in BUDGET_POLICIES:
        raise ConfigError(f"on_budget must be fail or ask, not {on_budget!r}")
    if fields and on_budget != "fail":
        fields["on_budget"] = on_budget  # "fail" is the default: not stored
    return fields


def with_batch_defaults(item: Submission | str, batch: Submission) -> Submission:
    """`item` with what it leaves unset taken from `batch`'s model, queue, key, priority."""
    if isinstance(item, str):
        return replace(batch, prompt=item)
    return replace(
        item,
        model=batch.model if item.model is None else item.model,
        queue=batch.queue if item.queue is None else item.queue,
        key=batch.key if item.key is None else item.key,
        priority=batch.priority if item.priority is None else item.priority,
    )


def agent_task(item: Submission) -> NewTask:
    """The checked task `submit` creates: a prompt (unless interactive), a queue name and
    id the store can hold, a model spec of a known form (the worker holds the API keys:
    only the form is checked), a relative `scripted:` path made absolute, as the worker
    that reads it runs elsewhere. Without tools of its own, it gets every tool of the
    plugins its worker pins: no plugin is started (an MCP server) to learn their names."""
    from noeta.backends.models.registry import stored_spec

    check_text("prompt", item.prompt)
    if not item.prompt.strip() and not item.interactive:
        raise ConfigError("a one-shot task needs a prompt (or submit it --interactive)")
    queue = check_key("queue name", DEFAULT_QUEUE if item.queue is None else item.queue)
    task_id = new_id(item.id)
    created = events.TaskCreated(
        model=stored_spec(check_text("model spec", item.model or DEFAULT_MODEL)),
        prompt=item.prompt if item.prompt.strip() else "",
        interactive=item.interactive,
        tools=tuple(item.tools) if item.tools is not None else None,
        **checked_budget(item.max_cost, item.max_tokens, item.on_budget),  # type: ignore[arg-type]
    )
    priority = DEFAULT_PRIORITY if item.priority is None else item.priority
    first = [NewEvent(*events.encode(created))]
    return NewTask(task_id, first, queue=queue, concurrency_key=item.key, priority=priority)


def in_batch(index: int, item: Submission) -> NewTask:
    """`agent_task`, its error naming the item's place in the batch (and id, if given)."""
    try:
        return agent_task(item)
    except (ConfigError, PayloadError) as error:
        named = f" (id {item.id!r})" if item.id is not None else ""
        raise type(error)(
            f"task {index} of the batch{named}: {error}; nothing of the batch was written"
        ) from None


def new_id(given: str | None) -> str:
    return check_task_id(given) if given is not None else uuid.uuid4().hex[:12]
