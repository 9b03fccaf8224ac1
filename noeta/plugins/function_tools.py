"""`@noeta.tool`: a plain Python function as a tool, offered to a model or run as a job.

The input schema comes from the type hints, the result is the return value as JSON, and
the tool recovery contract is the one every tool has (`retry_safe`, `recover`). A job's
failing attempt is retried by its own policy (`max_attempts`, `retry_on`, a backoff, a
`time_limit` per attempt) through the queue (ADR-0094); a model's call, within the call.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import json
import math
import random
import time
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import (
    TYPE_CHECKING,
    Any,
    Literal,
    TypeVar,
    overload,
)

from noeta.core.ports.payload import JSONValue
from noeta.core.ports.tool import FailedAttempt, ToolContext, ToolError, ToolFlags, ToolOutput
from noeta.core.retry import BACKOFF_CAP_SECONDS, FIRST_BACKOFF_SECONDS, GaveUp, with_retries
from noeta.plugins.function_process import run_attempt
from noeta.plugins.function_schema import input_schema_of
from noeta.plugins.soft_limits import within_soft_limit

if TYPE_CHECKING:
    from noeta.client.handles import TaskHandle

F = TypeVar("F", bound=Callable[..., Any])

# Every decorated function of this process, by tool name: what `enqueue` can name.
REGISTERED: dict[str, FunctionTool] = {}


Backoff = Literal["exponential", "fixed"]
# A job's retry waits in the queue, its slot free: it may wait long (Celery's default cap).
BACKOFF_MAX_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a failing attempt is retried when the function raises one of `retry_on`. A
    crash is the recovery contract's (`retry_safe`, `recover`); it counts as an attempt."""

    max_attempts: int = 1
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    backoff: Backoff = "exponential"
    backoff_base: float = FIRST_BACKOFF_SECONDS  # the first wait (fixed: every wait)
    backoff_max: float = BACKOFF_MAX_SECONDS
    jitter: bool = True  # each wait drawn from its half to its whole: spread the herd
    time_limit: float | None = None  # seconds per attempt; past it the attempt failed
    # Seconds per attempt before SoftTimeLimitExceeded is raised inside the function.
    soft_time_limit: float | None = None

    def wait_after(self, attempt: int, draw: float, cap: float = math.inf) -> float:
        """Seconds from failed attempt `attempt` (1-based) to the next; `draw` in [0, 1)."""
        growth = 1 if self.backoff == "fixed" else 2 ** min(attempt - 1, 64)
        wait = min(self.backoff_max, cap, self.backoff_base * growth)
        return wait * (0.5 + 0.5 * draw) if self.jitter else wait


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
        # Asked at every attempt, read once (a few us a call: a no-op job's every call).
        self._on_the_loop = flags.runs_in_a_thread or inspect.iscoroutinefunction(function)

    async def run(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput:
        if ctx.attempt == 0:  # a model's call: retried within the call
            return await self._run_within_call(input, ctx)
        began = time.monotonic()
        try:
            value = await self._attempt(input, ctx)
        except Exception as error:  # the attempt failed: logged, and retried or the end
            return self._failed(error, ctx.attempt, time.monotonic() - began)
        return ToolOutput(_as_json(self.name, value))

    async def _attempt(self, input: dict[str, JSONValue], ctx: ToolContext) -> Any:
        limit, soft_limit = self.policy.time_limit, self.policy.soft_time_limit
        if not self._on_the_loop:
            # A thread past its limit cannot be stopped: a process can (ADR-0090).
            return await run_attempt(self.module, self.name, input, ctx, limit, soft_limit)
        call = self._call(self.function, input, ctx)
        if soft_limit is not None:
            call = within_soft_limit(call, soft_limit)
        return await (call if limit is None else asyncio.wait_for(call, limit))

    def _failed(self, error: Exception, attempt: int, seconds: float) -> ToolOutput:
        """A job's failed attempt: the next is due after the backoff if the policy retries
        it and attempts are left; else the job ends with this error."""
        reason = self._reason(error)
        policy = self.policy
        if isinstance(error, policy.retry_on) and attempt < policy.max_attempts:
            wait = policy.wait_after(attempt, random.random())
            said = f"{self.name} attempt {attempt} of {policy.max_attempts} failed: {reason}"
            return ToolOutput(said, True, failed_attempt=FailedAttempt(reason, seconds, wait))
        said = f"{self.name} failed after {attempt} attempt(s): {reason}"
        return ToolOutput(said, True, failed_attempt=FailedAttempt(reason, seconds))

    def _reason(self, error: BaseException) -> str:
        if isinstance(error, TimeoutError):
            return f"ran past its time limit of {self.policy.time_limit}s"
        return f"{type(error).__name__}: {error}"

    async def _run_within_call(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput:
        """A model's call of the function: its attempts in this claim, the waits capped."""
        try:
            value = await with_retries(
                lambda: self._attempt(input, ctx),
                Exception,
                max_attempts=self.policy.max_attempts,
                wait=lambda n, _: self.policy.wait_after(n, random.random(), BACKOFF_CAP_SECONDS),
                sleep=asyncio.sleep,
                retryable=lambda error: isinstance(error, self.policy.retry_on),
            )
        except GaveUp as gave_up:
            reason = self._reason(gave_up.error)
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

    # `s` and `si` give a noeta.client.canvas.Signature, typed Any here: naming that class
    # even for the type checker would make plugins and the client import each other.
    def s(self, *args: Any, **kwargs: Any) -> Any:
        """Celery's signature: this call as a canvas member (ADR-0104); in a chain it
        receives the previous result as its first argument."""
        return _signature_maker()(self.name, args, kwargs)

    def si(self, *args: Any, **kwargs: Any) -> Any:
        """An immutable signature: a canvas member that receives no previous result."""
        return _signature_maker()(self.name, args, kwargs, immutable=True)

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


# Likewise the canvas's Signature (`fn.s()`, `fn.si()`; ADR-0104): noeta.client.canvas
# installs its class here when imported.
_installed_signature: list[Callable[..., Any]] = []


def install_signature(make: Callable[..., Any]) -> None:
    """Set what a `@noeta.tool` function's `s`/`si` make (the client's Signature)."""
    _installed_signature[:] = [make]


def _signature_maker() -> Callable[..., Any]:
    if not _installed_signature:
        importlib.import_module("noeta.client.canvas")  # it installs its Signature
    return _installed_signature[0]


@overload
def tool(function: F, /) -> F: ...


@overload
def tool(
    *,
    name: str | None = None,
    retry_safe: bool = False,
    recover: Callable[..., Any] | None = None,
    max_attempts: int | None = None,
    retry_on: Sequence[type[BaseException]] = (Exception,),
    backoff: Backoff = "exponential",
    backoff_base: float | None = None,
    backoff_max: float | None = None,
    jitter: bool = True,
    time_limit: float | None = None,
    soft_time_limit: float | None = None,
    first_backoff: float | None = None,
    backoff_cap: float | None = None,
) -> Callable[[F], F]: ...


def tool(
    function: F | None = None,
    /,
    *,
    name: str | None = None,
    retry_safe: bool = False,
    recover: Callable[..., Any] | None = None,
    max_attempts: int | None = None,
    retry_on: Sequence[type[BaseException]] = (Exception,),
    backoff: Backoff = "exponential",
    backoff_base: float | None = None,
    backoff_max: float | None = None,
    jitter: bool = True,
    time_limit: float | None = None,
    soft_time_limit: float | None = None,
    first_backoff: float | None = None,
    backoff_cap: float | None = None,
) -> Any:
    """Declare a function a tool: `@noeta.tool` or `@noeta.tool(retry_safe=True, …)`.

    `recover(ctx=…, **input)` finds what an interrupted run did (its result, or None);
    a function or recover taking `ctx` gets the `ToolContext` (its `idempotency_key`).
    A job's attempt that raises one of `retry_on` runs again `backoff_base` seconds later
    (`exponential`: doubling each time, up to `backoff_max`; `jitter`: drawn from half to
    whole), waiting in the queue; `max_attempts` counts every start, crashes included.
    `first_backoff` and `backoff_cap` are the old names of `backoff_base`, `backoff_max`.
    `soft_time_limit` raises `noeta.SoftTimeLimitExceeded` inside the function first;
    `time_limit` stops it for real (a sync function with either runs in its own process).
    """
    if max_attempts is not None and max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")
    _check_limits(time_limit, soft_time_limit)
    if backoff not in ("exponential", "fixed"):
        raise ValueError(f"backoff must be exponential or fixed, not {backoff!r}")
    base = _renamed("backoff_base", backoff_base, "first_backoff", first_backoff)
    most = _renamed("backoff_max", backoff_max, "backoff_cap", backoff_cap)
    policy = RetryPolicy(
        max_attempts or 1,
        tuple(retry_on),
        backoff,
        FIRST_BACKOFF_SECONDS if base is None else base,
        BACKOFF_MAX_SECONDS if most is None else most,
        jitter,
        time_limit,
        soft_time_limit,
    )

    def decorate(target: F) -> F:
        made = FunctionTool(
            target,
            name=name or target.__name__,
            description=inspect.cleandoc(target.__doc__ or target.__name__),
            flags=ToolFlags(
                retry_safe=retry_safe,
                # With a time limit a sync function runs in a process, which can be stopped
                # (and be sent SIGALRM for its soft limit).
                runs_in_a_thread=not inspect.iscoroutinefunction(target)
                and time_limit is None
                and soft_time_limit is None,
                max_attempts=max_attempts,  # unset: a crashed retry_safe call's default cap
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


def _check_limits(time_limit: float | None, soft_time_limit: float | None) -> None:
    # `not x > 0`, not `x <= 0`: NaN is neither, and no limit would ever hold.
    if time_limit is not None and not time_limit > 0:
        raise ValueError(f"time_limit must be positive, not {time_limit}")
    if soft_time_limit is not None and not soft_time_limit > 0:
        raise ValueError(f"soft_time_limit must be positive, not {soft_time_limit}")
    if time_limit is not None and soft_time_limit is not None and soft_time_limit >= time_limit:
        raise ValueError(
            f"soft_time_limit must be below time_limit ({soft_time_limit} >= {time_limit}):"
            " the exception comes first, then the stop"
        )


def _renamed(name: str, value: float | None, old_name: str, old: float | None) -> float | None:
    """A backoff option given by its name or its old one (not both), checked."""
    if value is not None and old is not None:
        raise ValueError(f"give {name} or {old_name} (its old name), not both")
    given = value if value is not None else old
    if given is not None and not (math.isfinite(given) and given >= 0):
        raise ValueError(f"{name} must be zero or more seconds, not {given}")
    return given


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
    if _takes_ctx(function):
        arguments["ctx"] = ctx
    return arguments


@functools.lru_cache(maxsize=1024)
def _takes_ctx(function: Callable[..., Any]) -> bool:
    """Whether the function has a `ctx` parameter: asked at every call, read once (its
    signature is a few percent of a no-op job's CPU in the worker)."""
    return "ctx" in inspect.signature(function).parameters


def call_with_context(
    function: Callable[..., Any], input: dict[str, JSONValue], ctx: ToolContext
) -> Any:
    """Call a sync function with its input (and `ctx` if it takes one): in a job's own
    process (noeta.plugins.function_process)."""
    return function(**_arguments(function, input, ctx))


def tools_in(module: types.ModuleType) -> list[FunctionTool]:
    """The tools a module's functions were decorated into, in definition order."""
    return [value for value in vars(module).values() if isinstance(value, FunctionTool)]


# What `json.dumps(value, ensure_ascii=False, allow_nan=False)` builds for every call.
_RESULT_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False)


def _as_json(name: str, value: Any) -> str:
    try:
        return _RESULT_JSON.encode(value)
    except (TypeError, ValueError) as error:
        raise ToolError(f"{name} returned a value that is not JSON: {error}") from None
