"""What the status line says for each state of a log (TaskProgress: pure, no terminal)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from noeta.cli.progress import TaskProgress, Written, elapsed, fit
from noeta.core.ports.model import Text, ToolCall
from noeta.core.retry import ModelRetry
from noeta.core.rules import events as ev


def progress_of(*log: ev.Event, epochs: tuple[tuple[int, str], ...] = ()) -> TaskProgress:
    progress = TaskProgress()
    for seq, event in enumerate(log, start=1):
        epoch, owner = epochs[seq - 1] if epochs else (0, "")
        progress.add(Written(seq, event, epoch=epoch, owner=owner or None))
    return progress


def words(progress: TaskProgress) -> str:
    """The line with its ticking times taken out."""
    return re.sub(r" \d+(\.\d)?s\b", "", progress.line())


CREATED = ev.TaskCreated(model="scripted:x", prompt="go")


def reply(*calls: ToolCall) -> ev.ModelReplied:
    return ev.ModelReplied((Text("ok"), *calls), "tool_use" if calls else "end_turn")


BASH = ToolCall("c1", "Bash", {"command": "ls"})


def test_a_model_call_then_a_tool_then_the_next_step() -> None:
    calling = progress_of(CREATED, ev.ModelCalled("sha"))
    assert words(calling) == "turn 1 step 1 | model call"
    assert calling.ticking
    running = progress_of(
        CREATED, ev.ModelCalled("sha"), reply(BASH), ev.ToolStarted("c1", "Bash", {})
    )
    assert words(running) == "turn 1 step 1 | tool Bash"
    done = ev.ToolFinished("c1", "x")
    assert words(progress_of(*running_log(), done)) == "turn 1 step 2 | calling the model"


def running_log() -> tuple[ev.Event, ...]:
    return CREATED, ev.ModelCalled("sha"), reply(BASH), ev.ToolStarted("c1", "Bash", {})


def test_each_wait_is_named() -> None:
    asked = ev.ToolWaiting("c1", "Bash", {"command": "ls"}, "may it?")
    waiting_answer = progress_of(CREATED, ev.ModelCalled("s"), reply(BASH), asked)
    assert (
        words(waiting_answer) == "turn 1 step 1 | waiting for an answer about Bash (noeta answer)"
    )
    agent = ToolCall("c2", "Agent", {"prompt": "help"})
    launched = ev.SubtaskLaunched("c2", "t.c2.1")
    children = progress_of(CREATED, ev.ModelCalled("s"), reply(agent), launched)
    assert words(children) == "turn 1 step 1 | waiting for 1 subtask"
    idle = ev.TaskCreated(model="scripted:x", interactive=True)
    assert words(progress_of(idle)) == "waiting for a message"
    timer = ev.WakeupScheduled("w1", "2026-11-30T12:00:00+00:00", "check")
    assert words(progress_of(idle, timer)) == "waiting for a timer due 2026-11-30T12:00:00+00:00"
    finished = ev.TaskFinished("done", "ok")
    assert words(progress_of(CREATED, ev.ModelCalled("s"), reply(), finished)) == (
        "turn 1 step 1 | done"
    )


def test_a_takeover_or_a_resume_names_the_new_epoch_and_its_worker() -> None:
    log = running_log()
    claims = ((0, ""), (1, "w1"), (1, "w1"), (1, "w1"))
    assert "taken over" not in progress_of(*log, epochs=claims).line()
    moved = progress_of(
        *log, ev.ToolFinished("c1", "x", recovery="lost"), epochs=(*claims, (2, "w2"))
    )
    assert words(moved).endswith(" | taken over by w2 (epoch 2)")
    idle = ev.TaskCreated(model="scripted:x", interactive=True)
    asked = ev.MessageTaken(1, "hello")
    resumed = progress_of(idle, asked, ev.ModelCalled("s"), epochs=((0, ""), (1, "w1"), (1, "w1")))
    assert "resumed" not in resumed.line() and "taken over" not in resumed.line()
    later = (ev.TurnEnded("answered", "hi"), ev.MessageTaken(2, "again"))
    handed_back = ((0, ""), (1, "w1"), (1, "w1"), (1, "w1"), (2, "w2"))
    resumed = progress_of(idle, asked, ev.ModelCalled("s"), *later, epochs=handed_back)
    assert words(resumed) == "turn 2 step 1 | calling the model | resumed by w2 (epoch 2)"


def test_a_retry_counts_down_then_says_the_attempt_is_sent() -> None:
    progress = progress_of(CREATED, ev.ModelCalled("sha"))
    progress.retried(ModelRetry(2, 9, "HTTP 529", 30.0))
    assert re.fullmatch(
        r"turn 1 step 1 \| model call \d+\.\ds \| HTTP 529, attempt 3/9 in (30\.0|29\.\d)s",
        progress.line(),
    ), progress.line()
    progress.retried(ModelRetry(3, 9, "timeout (ReadTimeout)", 0.0))
    assert progress.line().endswith("| timeout (ReadTimeout), attempt 4/9")
    progress.add(Written(3, reply()))  # the reply: the retry is over
    assert "attempt" not in progress.line()


def test_the_elapsed_time_is_from_when_the_event_was_written() -> None:
    progress = TaskProgress()
    progress.add(Written(1, CREATED))
    progress.add(Written(2, ev.ModelCalled("sha"), at=datetime.now(UTC) - timedelta(seconds=75)))
    assert re.fullmatch(r"turn 1 step 1 \| model call 1m1[56]s", progress.line()), progress.line()


def test_what_a_model_named_cannot_reach_the_terminal_as_control_characters() -> None:
    evil = ToolCall("c1", "Bash\x1b[2J\x07\nrm", {})
    progress = progress_of(
        CREATED, ev.ModelCalled("s"), reply(evil), ev.ToolStarted("c1", evil.name, {})
    )
    assert words(progress) == "turn 1 step 1 | tool Bash?[2J??rm"


def test_times_and_widths() -> None:
    assert [elapsed(s) for s in (-1, 3.44, 65, 7380)] == ["0.0s", "3.4s", "1m05s", "2h03m"]
    assert fit("日本語abc", 5) == "日本"  # a wide character takes two cells
    assert fit("abc", 3) == "abc" and fit("abcd", 3) == "abc"


def test_an_event_read_twice_is_folded_once() -> None:
    progress = progress_of(*running_log())
    progress.add(Written(4, ev.ToolStarted("c1", "Bash", {})))
    assert words(progress) == "turn 1 step 1 | tool Bash" and not progress.state.unreadable
