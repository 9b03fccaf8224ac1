"""Retrying a failing operation a bounded number of times with capped backoff: the one
helper (`with_retries`, `backoff_seconds`) that model calls and job deliveries share."""

from __future__ import annotations

import functools
import itertools
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from noeta.core.ports.model import ModelReply, Provider, ProviderError, ReplyDelta

DEFAULT_MAX_ATTEMPTS = 9
BACKOFF_CAP_SECONDS = 30.0
FIRST_BACKOFF_SECONDS = 0.5
# A server's Retry-After is honoured as given, up to this; past it we stop waiting.
RETRY_AFTER_CAP_SECONDS = 300.0
NO_JITTER = 1.0  # as `jitter`: the whole exponential wait, not spread

Sleep = Callable[[float], Awaitable[None]]
T = TypeVar("T")
E = TypeVar("E", bound=Exception)

log = logging.getLogger(__name__)
# The attribute of a retry's log record that holds its `ModelRetry`, for a handler (the
# status line of `noeta run`) that shows it rather than printing the line.
MODEL_RETRY_ATTRIBUTE = "noeta_model_retry"


@dataclass(frozen=True, slots=True)
class ModelRetry:
    """A model call's attempt failed and the call is sent again after `wait_seconds`."""

    attempt: int  # the failed one, 1-based
    max_attempts: int
    reason: str  # "HTTP 429", "timeout (ReadTimeout)": no provider words, no request
    wait_seconds: float


class GaveUp(Exception):
    """Every attempt failed, or one failed in a way no retry can fix; `error` is the last."""

    def __init__(self, error: Exception, attempts: int) -> None:
        super().__init__(str(error))
        self.error = error
        self.attempts = attempts


class ModelCallFailed(GaveUp):
    """A model call gave up: what the turn records as `ModelFailed`."""

    error: ProviderError

    def __init__(self, error: ProviderError, attempts: int) -> None:
        super().__init__(error, attempts)


def backoff_seconds(
    attempt: int,
    retry_after: float | None,
    jitter: float,
    *,
    first: float = FIRST_BACKOFF_SECONDS,
    cap: float = BACKOFF_CAP_SECONDS,
) -> float:
    """How long to wait after failed attempt number `attempt` (1-based)."""
    if retry_after is not None:
        return min(max(retry_after, 0.0), RETRY_AFTER_CAP_SECONDS)
    exponential: float = min(cap, first * 2 ** (attempt - 1))
    return exponential * (0.5 + 0.5 * jitter)  # jitter in [0, 1): spread the herd


def _always(error: Exception) -> bool:
    return True


async def with_retries(
    operation: Callable[[], Awaitable[T]],
    errors: type[E],
    *,
    max_attempts: int,
    wait: Callable[[int, E], float],
    sleep: Sleep,
    retryable: Callable[[E], bool] = _always,
    on_failure: Callable[[int, E], None] | None = None,
) -> T:
    """Run `operation` until it returns. Each of `errors` it raises is told to `on_failure`
    with the attempt's number (1-based) and retried after `wait(attempt, error)` seconds;
    raises `GaveUp` when one is not `retryable` or the `max_attempts`th fails. Any other
    exception propagates at once."""
    for attempt in range(1, max_attempts + 1):
        try:
            return await operation()
        except errors as error:
            if on_failure is not None:
                on_failure(attempt, error)
            if not retryable(error) or attempt == max_attempts:
                raise GaveUp(error, attempt) from error
            await sleep(wait(attempt, error))
    raise AssertionError("unreachable")


async def send_with_retries(
    provider: Provider,
    body: bytes,
    sleep: Sleep,
    *,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    jitter: Callable[[], float] = random.random,
    task_id: str = "",
    on_throttled: Callable[[float | None], Awaitable[None]] | None = None,
    on_delta: Callable[[int, ReplyDelta], None] | None = None,
) -> ModelReply:
    """Send `body` until a reply comes, or raise `ModelCallFailed`. Each retry is logged
    as one line (a warning) with the attempt, the reason and the wait. Each 429 is told
    to `on_throttled` with its Retry-After (the shared limits pause on it) before the wait.
    `on_delta` hears each attempt's reply as it streams, with the attempt's number
    (1-based): a delta of a higher number means the earlier attempt's are void."""
    throttled: list[float | None] = []
    attempts = itertools.count(1)

    def attempt() -> Awaitable[ModelReply]:
        if on_delta is None:  # a provider (or a test's) that cannot stream is sent as ever
            return provider.send(body)
        return provider.send(body, functools.partial(on_delta, next(attempts)))

    async def sleep_after(seconds: float) -> None:
        if throttled and on_throttled is not None:
            await on_throttled(throttled.pop())
        await sleep(seconds)

    def wait(attempt: int, error: ProviderError) -> float:
        if error.status == 429:
            throttled.append(error.retry_after)
        seconds = backoff_seconds(attempt, error.retry_after, jitter())
        retry = ModelRetry(attempt, max_attempts, error.reason, seconds)
        log.warning(
            "task %s: %s model call attempt %d of %d failed (%s); retrying in %.1f s",
            task_id or "-",
            provider.name,
            attempt,
            max_attempts,
            error.reason,
            seconds,
            extra={MODEL_RETRY_ATTRIBUTE: retry},
        )
        return seconds

    try:
        return await with_retries(
            attempt,
            ProviderError,
            max_attempts=max_attempts,
            wait=wait,
            sleep=sleep_after,
            retryable=lambda error: error.retryable,
        )
    except GaveUp as gave_up:
        assert isinstance(gave_up.error, ProviderError)
        raise ModelCallFailed(gave_up.error, gave_up.attempts) from gave_up.error
