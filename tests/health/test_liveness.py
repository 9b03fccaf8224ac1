"""Liveness on a clock the test turns: a loop is stuck only once it overruns its own
announced wait by the bound; a loop waiting for something that may take any time never is."""

from __future__ import annotations

from noeta.health.liveness import Liveness


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def stuck(liveness: Liveness) -> list[str]:
    return [state.name for state in liveness.states() if state.stuck]


def test_a_loop_is_stuck_only_past_its_own_wait_and_the_bound() -> None:
    clock = Clock()
    liveness = Liveness(stuck_after=5.0, monotonic=clock)
    liveness.turned("claim loop", 1.0)
    liveness.turned("lease renewer", 10.0)
    liveness.turned("waiting for a slot", None)
    clock.now += 6.0
    assert stuck(liveness) == []
    clock.now += 0.5  # 6.5 s: past the claim loop's 1 s wait and the 5 s bound
    assert stuck(liveness) == ["claim loop"]
    clock.now += 1000.0
    assert stuck(liveness) == ["claim loop", "lease renewer"]
    liveness.turned("claim loop", 1.0)  # it turned again
    liveness.forget("lease renewer")  # it ended on purpose
    assert stuck(liveness) == []
    assert [state.name for state in liveness.states()] == ["claim loop", "waiting for a slot"]
