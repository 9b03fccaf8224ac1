"""`@noeta.tool`: a plain Python function as a tool, offered to a model or run as a job.

The input schema comes from the type hints, the result is the return value as JSON, and
the tool recovery contract is the one every tool has (`retry_safe`, `recover`). A failing
run is retried in the same claim by its own policy (`max_attempts`, capped jittered
backoff, `retry_on`, a `time_limit` per run) through `noeta.core.retry.with_retries`.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import json
import random
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import (
    TYPE_CHECKING,
    Any,
    Literal,
    TypeVar,
    get_args,
    get_origin,
    get_type_hints,
    overload,
)

from noeta.core.ports.payload import JSONValue
from noeta.core.ports.tool import ToolContext, ToolError, ToolFlags, ToolOutput
from noeta.core.retry import (
    BACKOFF_CAP_SECONDS,
    FIRST_BACKOFF_SECONDS,
    GaveUp,
    backoff_seconds,
    with_retries,
)
from noeta.plugins.function_process import run_attempt

if TYPE_CHECKING:
    from noeta.client.handles import TaskHandle

F = TypeVar("F", bound=Callable[..., Any])

# Every decorated function of this process, by tool name: what `enqueue` can name.
REGISTERED: dict[str, FunctionTool] = {}


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How one run of a job is retried when the function raises (not after a crash:
    that is the recovery contract's, `retry_safe` and `recover`)."""

    max_attempts: int = 1
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    first_backoff: float = FIRST_BACKOFF_SECONDS
    backoff_cap: float = BACKOFF_CAP_SECONDS
    time_limit: float | None = None  # seconds per run; past it the run counts as failed


class FunctionTool:
    """A decorated function as a `Tool` (and a `RecoverableTool` when given `recover`)."""

    def __init__(
        self,
        function: Callable[..., Any],
        *,
        name: str,
        description: str,
        flags: ToolFlags,
        recover: Callable[..., Any] | None,
        policy: RetryPolicy,
    ) -> None:
        self.function = function
        self.name = name
        self.description = description
        self.flags = flags
        self.policy = policy
        self.module = function.__module__
        self._recover = recover
        self.input_schema: dict[str, JSONValue] = input_schema_of(function)

    async def run(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput:
        limit = self.policy.time_limit

        async def attempt() -> Any:
            if limit is not None and not inspect.iscoroutinefunction(self.function):
                # A thread past its limit cannot be stopped: a process can (ADR-0090).
                return await run_attempt(self.module, self.name, input, ctx, limit)
            return await asyncio.wait_for(self._call(self.function, input, ctx), limit)

        try:
            value = await with_retries(
                attempt,
                Exception,
                max_attempts=self.policy.max_attempts,
                wait=lambda n, _: backoff_seconds(
                    n,
                    None,
                    random.random(),
                    first=self.policy.first_backoff,
                    cap=self.policy.backoff_cap,
                ),
                sleep=asyncio.sleep,
                retryable=lambda error: isinstance(error, self.policy.retry_on),
            )
        except GaveUp as gave_up:
            error = gave_up.error
            if isinstance(error, TimeoutError):
                reason = f"ran past its time limit of {self.policy.time_limit}s"
            else:
                reason = f"{type(error).__name__}: {error}"
            raise ToolError(
                f"{self.name} failed after {gave_up.attempts} attempt(s): {reason}"
            ) from None
        return ToolOutput(_as_json(self.name, value))

    async def recover(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput | None:
        """What the function's `recover` found a half-done run did; None: nothing found."""
        if self._recover is None:
            return None
        found = await self._call(self._recover, input, ctx)
        return None if found is None else ToolOutput(_as_json(self.name, found))

    async def _call(
        self, function: Callable[..., Any], input: dict[str, JSONValue], ctx: ToolContext
    ) -> Any:
        arguments = _arguments(function, input, ctx)
        if inspect.iscoroutinefunction(function):
            return await function(**arguments)
        result = await asyncio.to_thread(functools.partial(function, **arguments))
        if inspect.isawaitable(result):
            return await result
        return result

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Calling the decorated name calls the function itself, as before decorating."""
        return self.function(*args, **kwargs)

    # Celery's call site: enqueue a call as a plain job, through the function the client
    # installs (noeta/client/celery_calls.py).

    def delay(self, *args: Any, **kwargs: Any) -> TaskHandle:
        """Enqueue this call as a job, as Celery's `delay`; `handle.get()` waits for it."""
        enqueue: TaskHandle = _call_site()(self, args, kwargs)
        return enqueue

    def apply_async(
        self,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        *,
        countdown: float | None = None,
        eta: datetime | None = None,
        queue: str | None = None,
        key: str | None = None,
        priority: int | None = None,
        unique_key: str | None = None,
        unique_for: float | None = None,
        debounce: float | None = None,
    ) -> TaskHandle:
        """Enqueue a call as Celery's `apply_async`: to start `countdown` seconds from
        now or at `eta`, on `queue`, with a concurrency `key` and a `priority` (0-9);
        `unique_key` with `unique_for` or `debounce` as for `enqueue` (ADR-0093)."""
        from noeta.core.ports.store import DEFAULT_PRIORITY, DEFAULT_QUEUE

        enqueued: TaskHandle = _call_site()(
            self,
            tuple(args or ()),
            kwargs,
            countdown=countdown,
            eta=eta,
            queue=DEFAULT_QUEUE if queue is None else queue,
            key=key,
            priority=DEFAULT_PRIORITY if priority is None else priority,
            unique_key=unique_key,
            unique_for=unique_for,
            debounce=debounce,
        )
        return enqueued


# The client installs the function `delay` and `apply_async` enqueue through: a plugin
# module does not depend on the client (it would be an import cycle: the client loads
# plugins); the client depends on it and fills this slot when it is imported.
_installed_call_site: list[Callable[..., Any]] = []


def install_call_site(enqueue: Callable[..., Any]) -> None:
    """Set how a `@noeta.tool` function's `delay`/`apply_async` enqueue a call."""
    _installed_call_site[:] = [enqueue]


def _call_site() -> Callable[..., Any]:
    if not _installed_call_site:
        importlib.import_module("noeta.client")  # its celery_calls module installs it
    return _installed_call_site[0]


@overload
def tool(function: F, /) -> F: ...


@overload
def tool(
    *,
    name: str | None = None,
    retry_safe: bool = False,
    recover: Callable[..., Any] | None = None,
    max_attempts: int = 1,
    retry_on: Sequence[type[BaseException]] = (Exception,),
    first_backoff: float = FIRST_BACKOFF_SECONDS,
    backoff_cap: float = BACKOFF_CAP_SECONDS,
    time_limit: float | None = None,
) -> Callable[[F], F]: ...


def tool(
    function: F | None = None,
    /,
    *,
    name: str | None = None,
    retry_safe: bool = False,
    recover: Callable[..., Any] | None = None,
    max_attempts: int = 1,
    retry_on: Sequence[type[BaseException]] = (Exception,),
    first_backoff: float = FIRST_BACKOFF_SECONDS,
    backoff_cap: float = BACKOFF_CAP_SECONDS,
    time_limit: float | None = None,
) -> Any:
    """Declare a function a tool: `@noeta.tool` or `@noeta.tool(retry_safe=True, …)`.

    `recover(ctx=…, **input)` finds what an interrupted run did (its result, or None);
    a function or recover taking `ctx` gets the `ToolContext` (its `idempotency_key`).
    """
    if max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")
    if time_limit is not None and time_limit <= 0:
        raise ValueError("time_limit must be positive")
    policy = RetryPolicy(max_attempts, tuple(retry_on), first_backoff, backoff_cap, time_limit)

    def decorate(target: F) -> F:
        made = FunctionTool(
            target,
            name=name or target.__name__,
            description=inspect.cleandoc(target.__doc__ or target.__name__),
            flags=ToolFlags(
                retry_safe=retry_safe,
                # With a time limit a sync function runs in a process, which can be stopped.
                runs_in_a_thread=not inspect.iscoroutinefunction(target) and time_limit is None,
            ),
            recover=recover,
            policy=policy,
        )
        known = REGISTERED.get(made.name)
        if known is not None and known.module != made.module:
            raise ValueError(f"two functions are tools named {made.name!r} ({known.module})")
        REGISTERED[made.name] = made
        functools.update_wrapper(made, target)
        return made  # type: ignore[return-value]

    return decorate if function is None else decorate(function)


class FunctionsPlugin:
    """A module's decorated functions as a plugin named after the module."""

    def __init__(self, name: str, tools: Sequence[FunctionTool]) -> None:
        self.name = name
        self._tools = list(tools)

    def tools(self) -> Sequence[FunctionTool]:
        return self._tools


def _arguments(
    function: Callable[..., Any], input: dict[str, JSONValue], ctx: ToolContext
) -> dict[str, Any]:
    arguments: dict[str, Any] = dict(input)
    if "ctx" in inspect.signature(function).parameters:
        arguments["ctx"] = ctx
    return arguments


def call_with_context(
    function: Callable[..., Any], input: dict[str, JSONValue], ctx: ToolContext
) -> Any:
    """Call a sync function with its input (and `ctx` if it takes one): in a job's own
    process (noeta.plugins.function_process)."""
    return function(**_arguments(function, input, ctx))


def tools_in(module: types.ModuleType) -> list[FunctionTool]:
    """The tools a module's functions were decorated into, in definition order."""
    return [value for value in vars(module).values() if isinstance(value, FunctionTool)]


def input_schema_of(function: Callable[..., Any]) -> dict[str, JSONValue]:
    """A JSON schema of the function's parameters, from their type hints."""
    hints = get_type_hints(function)
    properties: dict[str, JSONValue] = {}
    required: list[JSONValue] = []
    for parameter in inspect.signature(function).parameters.values():
        if parameter.name == "ctx":
            continue
        if parameter.kind not in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
            raise TypeError(f"{function.__name__}: *{parameter.name} cannot come from JSON")
        if parameter.name not in hints:
            raise TypeError(f"{function.__name__}: parameter {parameter.name} has no type hint")
        properties[parameter.name] = _schema(hints[parameter.name], function.__name__)
        if parameter.default is parameter.empty:
            required.append(parameter.name)
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


_SIMPLE: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _schema(hint: Any, where: str) -> dict[str, JSONValue]:
    if hint in _SIMPLE:
        return {"type": _SIMPLE[hint]}
    if hint is type(None):
        return {"type": "null"}
    if hint is Any or hint is JSONValue:
        return {}
    origin, arguments = get_origin(hint), get_args(hint)
    if origin in (list, tuple, Sequence) and arguments:
        return {"type": "array", "items": _schema(arguments[0], where)}
    if origin is dict and arguments and arguments[0] is str:
        return {"type": "object", "additionalProperties": _schema(arguments[1], where)}
    if origin in (types.UnionType, typing.Union):
        return {"anyOf": [_schema(each, where) for each in arguments]}
    if origin is Literal:
        return {"enum": list(arguments)}
    raise TypeError(f"{where}: the type {hint!r} has no JSON schema here")


def _as_json(name: str, value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ToolError(f"{name} returned a value that is not JSON: {error}") from None
