"""A plain job as a new task: the checks `enqueue` makes before writing anything, and the
log it starts with (TaskCreated, CallRequested, the pin of the function's module)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from noeta.client.input_checks import quick_check
from noeta.core.errors import ConfigError, PayloadError
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.store import DEFAULT_PRIORITY, NewEvent, NewTask, Store, check_key
from noeta.core.rules import events
from noeta.core.rules.tool_input import input_problem
from noeta.plugins.function_tools import REGISTERED, FunctionTool
from noeta.plugins.loading import module_pin

if TYPE_CHECKING:  # the config (and YAML) only for what reads one
    from noeta.config import Config

JOB_CALL_ID = "job"  # the one call of a job task: its idempotency key is "<task id>:job"


class UnknownJob(ConfigError):
    """No function decorated `@noeta.tool` has that name in this process."""

    def __init__(self, name: str) -> None:
        known = ", ".join(sorted(REGISTERED)) or "none"
        super().__init__(
            f"no job named {name!r} (known: {known}): a job is a @noeta.tool function of a "
            "module that a `module:` plugin of the config (--config FILE) names, or that "
            "the program imported"
        )
        self.name = name


def job_tool(name: str) -> FunctionTool:
    tool = REGISTERED.get(name)
    if tool is None:
        raise UnknownJob(name)
    return tool


def configured_job_tool(name: str, config: str | Config | None) -> FunctionTool:
    """The decorated function named `name`: imported already, or by the config's plugins
    (the CLI knows a job only through them), imported and built, none started (an MCP
    server stays unstarted: a client runs no tool)."""
    if name not in REGISTERED and config is not None:
        from noeta.config import Config, load_config
        from noeta.plugins.loading import load

        for spec in (config if isinstance(config, Config) else load_config(config)).plugins:
            load(spec)  # importing their modules registers their functions
    return job_tool(name)


def job_input(tool: FunctionTool, input: Mapping[str, object] | None) -> dict[str, JSONValue]:
    """The input as the log will hold it, checked against the function's schema."""
    given = dict(input or {})
    try:
        # A round trip through JSON: exactly what the worker will call the function with.
        checked: dict[str, JSONValue] = json.loads(json.dumps(given, allow_nan=False))
    except (TypeError, ValueError) as error:
        raise PayloadError(f"the input of job {tool.name!r} is not JSON: {error}") from None
    problem = input_problem(tool, checked)
    if problem:
        raise PayloadError(problem)
    return checked


def ready_at(
    now: datetime,
    *,
    run_at: datetime | None = None,
    delay: float | None = None,
    eta: datetime | None = None,
    countdown: float | None = None,
) -> datetime | None:
    """When the job may start: at `eta` (Celery's name for `run_at`; aware), `countdown`
    seconds (Celery's name for `delay`) after `now` (the store's clock), or at once. At
    most one of the four: the one check for `enqueue`, `enqueue_many` and `apply_async`."""
    given = {
        name: value
        for name, value in (("countdown", countdown), ("eta", eta), ("delay", delay))
        if value is not None
    }
    if run_at is not None:
        given["run_at"] = run_at
    if len(given) > 1:
        first, second = list(given)[:2]
        raise ConfigError(f"give {first} or {second}, not both")
    for name, value in given.items():
        if isinstance(value, datetime):
            if value.tzinfo is None or value.utcoffset() is None:
                raise ConfigError(f"{name} needs a time zone (e.g. datetime.now(UTC))")
            return value
        if isinstance(value, bool) or not math.isfinite(value) or value < 0:
            raise ConfigError(f"{name} must be zero or more seconds, not {value}")
        return now + timedelta(seconds=value)
    return None


async def start_time(
    open_store: Callable[[], Awaitable[Store]],
    *,
    run_at: datetime | None,
    delay: float | None,
    eta: datetime | None,
    countdown: float | None,
) -> datetime | None:
    """`ready_at`, checked before the store is opened; a start relative to now is on the
    store's clock."""
    local = datetime.now().astimezone()
    start = ready_at(local, run_at=run_at, delay=delay, eta=eta, countdown=countdown)
    if start is None or (delay is None and countdown is None):
        return start
    now = await (await open_store()).clock()
    return ready_at(now, run_at=run_at, delay=delay, eta=eta, countdown=countdown)


def job_task(
    task_id: str,
    tool: FunctionTool,
    input: dict[str, JSONValue],
    queue: str,
    start: datetime | None,
    key: str | None = None,
    priority: int = DEFAULT_PRIORITY,
) -> NewTask:
    """A job's task: its first events, and `key` (concurrency) and `priority`."""
    created = events.TaskCreated(model="", tools=(tool.name,))
    call = events.CallRequested(JOB_CALL_ID, tool.name, input)
    pinned = events.PluginsPinned((module_pin(tool.module),))
    log = [NewEvent(*events.encode(event)) for event in (created, call, pinned)]
    return NewTask(
        task_id, log, queue=queue, ready_at=start, concurrency_key=key, priority=priority
    )


def job_batch(
    tool: FunctionTool,
    inputs: Iterable[Mapping[str, object] | None],
    *,
    queue: str,
    start: datetime | None,
    key: str | None,
    priority: int,
) -> list[NewTask]:
    """The tasks of an `enqueue_many` batch, their ids made here (a resend after a lost
    reply sends the same ones), every input checked first: a bad one raises naming its
    index (from 0), before anything is written. The events every job shares (its
    creation, the pin) are made once: a batch of 10,000 is built in a fraction of a
    second."""
    check_key("queue name", queue)
    checked = _checked_batch(tool, [dict(input or {}) for input in inputs])
    first = job_task("shared", tool, {}, queue, start)
    created, call, pinned = first.events
    call_data = call.data
    assert isinstance(call_data, dict)  # an encoded event is an object
    return [
        NewTask(
            task_id,
            [created, NewEvent(call.type, {**call_data, "input": input}), pinned],
            queue=queue,
            ready_at=start,
            concurrency_key=key,
            priority=priority,
        )
        for task_id, input in zip(new_ids(len(checked)), checked, strict=True)
    ]


def new_ids(count: int) -> list[str]:
    """`count` task ids of the form `enqueue` makes (12 random hex digits), from one read
    of the system's randomness."""
    random = os.urandom(6 * count).hex()
    return [random[at : at + 12] for at in range(0, 12 * count, 12)]


def _checked_batch(
    tool: FunctionTool, inputs: list[dict[str, object]]
) -> list[dict[str, JSONValue]]:
    """Every input as `job_input` checks it: through JSON once for the whole batch, the
    schema by the quick check, and by jsonschema where that is not sure (its message)."""
    try:
        passed: list[dict[str, JSONValue]] = json.loads(json.dumps(inputs, allow_nan=False))
    except (TypeError, ValueError):
        return [_checked_in_batch(tool, index, input) for index, input in enumerate(inputs)]
    check = quick_check(tool.input_schema)
    return [
        input if check is not None and check(input) else _checked_in_batch(tool, index, input)
        for index, input in enumerate(passed)
    ]


def _checked_in_batch(
    tool: FunctionTool, index: int, input: Mapping[str, object] | None
) -> dict[str, JSONValue]:
    try:
        return job_input(tool, input)
    except PayloadError as error:
        raise PayloadError(
            f"job {index} of the batch: {error}; nothing of the batch was written"
        ) from None
