"""What `submit` and `submit_many` create: a `Submission` checked into the agent task it
becomes (a prompt, a queue, an id, a model spec of a known form, its tools).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace

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
