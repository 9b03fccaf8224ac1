"""The canvas rule (ADR-0104): a canvas task's next action, from its folded log alone."""

from __future__ import annotations

import json

from noeta.core.ports.payload import JSONValue
from noeta.core.rules import events as ev
from noeta.core.rules import snapshot
from noeta.core.rules.canvas import LAUNCH_BATCH, AwaitMembers, LaunchMembers
from noeta.core.rules.fold import LoggedEvent, fold
from noeta.core.rules.next_action import FinishTask, next_action
from noeta.core.rules.task_state import TaskState


def leaf(job: str, receives: str = "", **input: JSONValue) -> dict[str, JSONValue]:
    return {"job": job, "input": dict(input), "receives": receives}


def canvas(tree: dict[str, JSONValue], *later: ev.Event) -> TaskState:
    log: list[ev.Event] = [
        ev.TaskCreated(model="", tools=()),
        ev.CanvasRequested({"jobs": {}, "tree": tree}),
        *later,
    ]
    return fold(LoggedEvent(seq, event) for seq, event in enumerate(log, 1))


def launched(*calls: str) -> list[ev.Event]:
    return [ev.SubtaskLaunched(call, f"c.{call}.1") for call in calls]


def ended(call: str, status: str, report: JSONValue | str, inbox: int) -> ev.SubtaskReturned:
    text = report if isinstance(report, str) and status != "done" else json.dumps(report)
    return ev.SubtaskReturned(f"c.{call}.1", status, inbox, text)


CHAIN = {"chain": [leaf("add", x=1, y=2), leaf("add", "x", y=3), leaf("mul", "x", y=10)]}


def test_a_chain_launches_one_member_at_a_time_each_given_the_last_result() -> None:
    first = next_action(canvas(CHAIN))
    assert isinstance(first, LaunchMembers)
    assert [(m.call_id, m.input) for m in first.members] == [("m0", {"x": 1, "y": 2})]
    assert next_action(canvas(CHAIN, *launched("m0"))) == AwaitMembers()
    second = next_action(canvas(CHAIN, *launched("m0"), ended("m0", "done", 3, 1)))
    assert isinstance(second, LaunchMembers)
    assert [(m.call_id, m.input) for m in second.members] == [("m1", {"y": 3, "x": 3})]


def test_a_chain_ends_with_its_last_result_or_its_first_failure() -> None:
    done = canvas(
        CHAIN,
        *launched("m0"),
        ended("m0", "done", 3, 1),
        *launched("m1"),
        ended("m1", "done", 6, 2),
        *launched("m2"),
        ended("m2", "done", 60, 3),
    )
    assert next_action(done) == FinishTask("done", answer="60")
    failed = canvas(CHAIN, *launched("m0"), ended("m0", "failed", "ValueError: no", 1))
    assert next_action(failed) == FinishTask(
        "failed", error="member m0 (add) failed: ValueError: no"
    )


def test_a_group_launches_every_member_and_keeps_their_order() -> None:
    tree = {"group": [leaf("add", x=n, y=n) for n in range(3)]}
    first = next_action(canvas(tree))
    assert isinstance(first, LaunchMembers)
    assert [m.call_id for m in first.members] == ["m0", "m1", "m2"]
    # Ends come back in any order; the result is in the members' order.
    state = canvas(
        tree,
        *launched("m0", "m1", "m2"),
        ended("m2", "done", 4, 1),
        ended("m0", "done", 0, 2),
        ended("m1", "done", 2, 3),
    )
    assert next_action(state) == FinishTask("done", answer="[0, 2, 4]")


def test_a_large_group_is_launched_in_batches() -> None:
    tree = {"group": [leaf("noop") for _ in range(LAUNCH_BATCH + 1)]}
    first = next_action(canvas(tree))
    assert isinstance(first, LaunchMembers) and len(first.members) == LAUNCH_BATCH
    rest = next_action(canvas(tree, *launched(*(f"m{n}" for n in range(LAUNCH_BATCH)))))
    assert isinstance(rest, LaunchMembers)
    assert [m.call_id for m in rest.members] == [f"m{LAUNCH_BATCH}"]


def test_a_launch_that_says_no_more_leaves_the_canvas_waiting_once_it_lands() -> None:
    """The step's append trusts `more` instead of walking the tree again (ADR-0120): after
    a launch without it, the walk finds nothing more to launch; after one with it, more."""
    nested = {"chain": [{"group": [leaf("add", x=1, y=1), CHAIN]}, leaf("tsum", "numbers")]}
    big = {"group": [leaf("noop") for _ in range(2 * LAUNCH_BATCH + 1)]}
    one_back = (*launched("m0"), ended("m0", "done", 3, 1))
    batches = []
    for tree, before in ((CHAIN, ()), (CHAIN, one_back), (nested, ()), (nested, launched("m0")),
                         (big, ())):  # fmt: skip
        log = list(before)
        while isinstance(step := next_action(canvas(tree, *log)), LaunchMembers):
            log += launched(*(member.call_id for member in step.members))
            after = next_action(canvas(tree, *log))
            assert isinstance(after, LaunchMembers) if step.more else after == AwaitMembers()
            batches.append(len(step.members))
    assert batches == [1, 1, 2, 1, LAUNCH_BATCH, LAUNCH_BATCH, 1]


def test_a_chord_calls_back_once_with_the_list_and_ignore_errors_gives_an_error_value() -> None:
    header = {"group": [leaf("add", x=1, y=1), {**leaf("boom"), "ignore_errors": True}]}
    tree = {"chord": [header, leaf("tsum", "numbers")]}
    state = canvas(
        tree, *launched("m0", "m1"), ended("m0", "done", 2, 1), ended("m1", "failed", "no", 2)
    )
    callback = next_action(state)
    assert isinstance(callback, LaunchMembers)
    assert [(m.call_id, m.input) for m in callback.members] == [
        ("m2", {"numbers": [2, {"error": "member m1 (boom) failed: no"}]})
    ]
    assert next_action(fold([LoggedEvent(state.last_seq + 1, launched("m2")[0])], state)) == (
        AwaitMembers()
    )


def test_a_canvas_state_survives_a_snapshot() -> None:
    state = canvas(CHAIN, *launched("m0"), ended("m0", "done", 3, 1))
    assert snapshot.load(snapshot.dump(state)) == state
