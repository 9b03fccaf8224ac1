"""Provider-error retries inside one model call: a bounded number, with capped backoff."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable

from noeta.core.model import ModelReply, Provider, ProviderError

DEFAULT_MAX_ATTEMPTS = 9
BACKOFF_CAP_SECONDS = 30.0
FIRST_BACKOFF_SECONDS = 0.5
# A server's Retry-After is honoured as given, up to this; past it we stop waiting.
RETRY_AFTER_CAP_SECONDS = 300.0

Sleep = Callable[[float], Awaitable[None]]


class ModelCallFailed(Exception):
    """Every attempt failed, or one failed in a way no retry can fix."""

    def __init__(self, error: ProviderError, attempts: int) -> None:
        super().__init__(str(error))
        self.error = error
        self.attempts = attempts


def backoff_seconds(attempt: int, retry_after: float | None, jitter: float) -> float:
    """How long to wait after failed attempt number `attempt` (1-based)."""
    if retry_after is not None:
        return min(max(retry_after, 0.0), RETRY_AFTER_CAP_SECONDS)
    exponential: float = min(BACKOFF_CAP_SECONDS, FIRST_BACKOFF_SECONDS * 2 ** (attempt - 1))
    return exponential * (0.5 + 0.5 * jitter)  # jitter in [0, 1): spread the herd


async def send_with_retries(
    provider: Provider,
    body: bytes,
    sleep: Sleep,
    *,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    jitter: Callable[[], float] = random.random,
) -> ModelReply:
    """Send `body` until a reply comes, or raise `ModelCallFailed`."""
    for attempt in range(1, max_attempts + 1):
        try:
            return await provider.send(body)
        except ProviderError as error:
            if not error.retryable or attempt == max_attempts:
                raise ModelCallFailed(error, attempt) from error
            await sleep(backoff_seconds(attempt, error.retry_after, jitter()))
    raise AssertionError("unreachable")
