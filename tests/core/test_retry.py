"""with_retries, the one retry loop: how often it tries, how long it waits, when it gives up."""

from __future__ import annotations

import pytest

from noeta.core.retry import NO_JITTER, GaveUp, backoff_seconds, with_retries


class Flaky(Exception):
    def __init__(self, permanent: bool = False) -> None:
        super().__init__("permanent" if permanent else "flaky")
        self.permanent = permanent


class Operation:
    """Fails with the given errors in turn, then returns "ok"; counts its calls."""

    def __init__(self, *failures: Exception) -> None:
        self.failures = list(failures)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "ok"


async def run(operation: Operation, waits: list[float], max_attempts: int = 3) -> str:
    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    return await with_retries(
        operation,
        Flaky,
        max_attempts=max_attempts,
        wait=lambda attempt, error: float(attempt),
        sleep=sleep,
        retryable=lambda error: not error.permanent,
    )


async def test_it_retries_until_the_operation_returns_waiting_as_told() -> None:
    waits: list[float] = []
    assert await run(Operation(Flaky(), Flaky()), waits) == "ok"
    assert waits == [1.0, 2.0]


async def test_it_gives_up_after_the_last_attempt_without_waiting_after_it() -> None:
    waits: list[float] = []
    operation = Operation(Flaky(), Flaky(), Flaky())
    with pytest.raises(GaveUp) as gave_up:
        await run(operation, waits)
    assert (gave_up.value.attempts, operation.calls, waits) == (3, 3, [1.0, 2.0])


async def test_an_error_no_retry_can_fix_gives_up_at_once() -> None:
    waits: list[float] = []
    with pytest.raises(GaveUp) as gave_up:
        await run(Operation(Flaky(permanent=True)), waits)
    assert gave_up.value.attempts == 1 and waits == []
    assert isinstance(gave_up.value.error, Flaky)


async def test_other_exceptions_are_not_retried() -> None:
    waits: list[float] = []
    operation = Operation(ValueError("a bug"))
    with pytest.raises(ValueError):
        await run(operation, waits)
    assert operation.calls == 1


def test_the_backoff_doubles_up_to_its_cap_and_retry_after_wins() -> None:
    waits = [backoff_seconds(n, None, NO_JITTER, first=1.0, cap=10.0) for n in range(1, 7)]
    assert waits == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]  # a job result's deliveries
    assert backoff_seconds(3, None, 0.0) == 1.0  # 0.5 * 2**2, jittered down to half
    assert backoff_seconds(3, 42.0, 0.0) == 42.0
