"""`@noeta.tool`'s retry options (issue 29 item 6): the backoff a job's next attempt
waits, the old option names still taken, and each bad option refused at decoration."""

from __future__ import annotations

from typing import Any

import pytest

import noeta
from noeta.plugins.function_tools import REGISTERED, FunctionTool, RetryPolicy


def decorated(**options: Any) -> FunctionTool:
    def policy_probe() -> None:
        """Does nothing: only its policy is looked at."""

    made = noeta.tool(name="policy_probe", **options)(policy_probe)
    REGISTERED.pop("policy_probe", None)  # not a job any test enqueues
    assert isinstance(made, FunctionTool)
    return made


def test_exponential_waits_double_up_to_the_cap_and_fixed_ones_do_not() -> None:
    exponential = RetryPolicy(backoff_base=2, backoff_max=10, jitter=False)
    assert [exponential.wait_after(n, 0.0) for n in (1, 2, 3, 4, 100_000)] == [2, 4, 8, 10, 10]
    fixed = RetryPolicy(backoff="fixed", backoff_base=3, jitter=False)
    assert [fixed.wait_after(n, 0.0) for n in (1, 2, 5)] == [3, 3, 3]
    jittered = RetryPolicy(backoff_base=4, jitter=True)
    assert (jittered.wait_after(1, 0.0), jittered.wait_after(1, 0.999)) == (2.0, 3.998)


def test_the_old_names_are_the_new_options() -> None:
    old = decorated(max_attempts=3, first_backoff=0.25, backoff_cap=7).policy
    assert (old.backoff_base, old.backoff_max) == (0.25, 7)
    new = decorated(max_attempts=3, backoff_base=0.25, backoff_max=7).policy
    assert new == old


def test_max_attempts_caps_a_crashed_jobs_starts_only_when_given() -> None:
    assert decorated(retry_safe=True).flags.max_attempts is None  # the tools' own cap, 3
    assert decorated(retry_safe=True, max_attempts=5).flags.max_attempts == 5


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_attempts": 0}, "max_attempts must be at least 1"),
        ({"backoff": "linear"}, "backoff must be exponential or fixed, not 'linear'"),
        ({"backoff_base": -1}, "backoff_base must be zero or more seconds, not -1"),
        ({"backoff_max": float("nan")}, "backoff_max must be zero or more seconds, not nan"),
        ({"first_backoff": -2}, "backoff_base must be zero or more seconds, not -2"),
        ({"backoff_base": 1, "first_backoff": 1}, "give backoff_base or first_backoff"),
        ({"backoff_max": 1, "backoff_cap": 1}, "give backoff_max or backoff_cap"),
    ],
)
def test_bad_retry_options_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decorated(**options)
