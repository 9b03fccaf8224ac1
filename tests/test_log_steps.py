"""What the timeline and `noeta show` say of a claim that wrote nothing (issue 31 item 6):
which worker held the task, until when, and why it let go when that is known; and of a
budget's refusal."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from noeta.core.rules import events
from noeta.log_steps import LatestClaim, Line, StepContext, claim_that_wrote_nothing, step_of

NOW = datetime(2026, 12, 2, 10, 0, 0, tzinfo=UTC)


def claim(status: str, lease: timedelta | None, **registry: object) -> LatestClaim:
    until = None if lease is None else NOW + lease
    return LatestClaim(status, "w-2", 3, until, NOW - timedelta(seconds=5), **registry)  # type: ignore[arg-type]


def test_a_claim_the_log_holds_is_not_said_again() -> None:
    assert claim_that_wrote_nothing(claim("running", timedelta(30)), 3, NOW) == ""
    nobody = LatestClaim("ready", None, 0, None, NOW)
    assert claim_that_wrote_nothing(nobody, 0, NOW) == ""


def test_held_lapsed_and_handed_back_claims_say_who_until_when_and_why() -> None:
    held = claim_that_wrote_nothing(claim("running", timedelta(seconds=30)), 1, NOW)
    assert held == (
        "epoch 3: claimed by w-2 after the last event; it holds the task, lease until "
        "10:00:30 UTC, and has written nothing yet; w-2 is not in the workers registry "
        "(epoch 2 claimed the task before and wrote nothing; the holder is not kept)"
    )
    seen = NOW - timedelta(minutes=2)
    dead = claim("running", timedelta(seconds=-60), worker_state="dead", worker_seen=seen)
    assert claim_that_wrote_nothing(dead, 2, NOW) == (
        "epoch 3: claimed by w-2 after the last event; it wrote nothing and its lease "
        "lapsed at 09:59:00 UTC; its worker is dead (silent since 09:58:00 UTC)"
    )
    released = claim("ready", None, worker_state="live")
    assert claim_that_wrote_nothing(released, 2, NOW) == (
        "epoch 3: claimed by w-2 after the last event; it wrote nothing and handed the task "
        "back at 09:59:55 UTC (it lacked a plugin the task pinned, or was shutting down); "
        "its worker is live"
    )
    stopped = claim("ready", None, worker_state="stopped")
    assert "handed the task back at 09:59:55 UTC as it stopped; its worker has stopped" in (
        claim_that_wrote_nothing(stopped, 2, NOW)
    )


class Logged:
    """A stored event as the steps read it."""

    def __init__(self, event: events.Event) -> None:
        self.type, self.data = events.encode(event)
        self.seq, self.created_at, self.epoch, self.owner = 5, NOW, 1, "w-1"


def test_a_budget_refusal_is_said_in_words_not_as_its_fields() -> None:
    """`noeta show` and the timeline name the budget, the spend and the estimate."""
    fleet = events.BudgetExceeded("fleet", "9.981000", 1200, "10.00", "research/acme --per-day")
    own = events.BudgetExceeded("cost", "0.450000", 300, "0.40")
    logged = [Logged(refused) for refused in (fleet, own)]
    steps = [step_of(each, each.data, StepContext()) for each in logged]
    assert [(s.css, s.title) for s in steps] == [("error", "budget exceeded: call not sent")] * 2
    assert steps[0].parts == (
        Line(
            "fleet budget research/acme --per-day 10.00: $9.981000 spent this day, and the "
            "next call's request is estimated at 1200 input tokens"
        ),
    )
    assert steps[1].parts == (
        Line(
            "--max-cost 0.40: $0.450000 spent, and the next call's request is estimated at "
            "300 input tokens"
        ),
    )
