"""What a worker continues with when a run ends (ADR-0109): a member's canvas, a canvas
step's first new member; and not a canvas whose last step here launched nothing (a
fan-in, where the claim would mostly find it busy)."""

from __future__ import annotations

from noeta.core.rules.task_state import TaskState
from noeta.core.runner.task import RunResult
from noeta.worker.continuing import QUIET_CANVASES, follow_on

CANVAS = TaskState(canvas={"tree": {}})
MEMBER = TaskState(finished="done", job="add", parent="c")


def test_a_members_finish_continues_its_canvas_unless_its_fan_in_is_quiet() -> None:
    quiet: dict[str, None] = {}
    assert follow_on("c.m0.1", RunResult("finished", MEMBER), quiet) == ("c",)
    assert follow_on("c", RunResult("waiting", CANVAS, ("c.m1.1", "c.m2.1")), quiet) == ("c.m1.1",)
    assert follow_on("c", RunResult("waiting", CANVAS), quiet) == ()  # launched nothing
    assert follow_on("c.m1.1", RunResult("finished", MEMBER), quiet) == ()
    assert follow_on("c", RunResult("waiting", CANVAS, ("c.m3.1",)), quiet) == ("c.m3.1",)
    assert follow_on("c.m3.1", RunResult("finished", MEMBER), quiet) == ("c",)


def test_nothing_else_is_continued_and_the_quiet_canvases_are_bounded() -> None:
    quiet: dict[str, None] = {}
    agent_child = TaskState(finished="done", parent="p")  # a subagent: no job
    assert follow_on("p.a.1", RunResult("finished", agent_child), quiet) == ()
    assert follow_on("j", RunResult("finished", TaskState(finished="done", job="add")), quiet) == ()
    assert follow_on("c", RunResult("finished", CANVAS, ("x",)), quiet) == ()
    for n in range(QUIET_CANVASES + 5):
        follow_on(f"c{n}", RunResult("waiting", CANVAS), quiet)
    assert len(quiet) == QUIET_CANVASES and "c0" not in quiet and f"c{QUIET_CANVASES}" in quiet
