"""`noeta show` and `tail` print a log as readable steps, as the web timeline says them
(`noeta.log_steps`): a model call with its tokens and latency, a tool call with its input
and a folded result, a failed attempt in words, a takeover, a failure with its error; no
raw JSON cut short. `show --json` stays the log as stored."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from noeta.cli.text import StepPrinter
from noeta.core.ports.model import Text, ToolCall, Usage
from noeta.core.ports.store import StoredEvent
from noeta.core.rules import events
from tests.cli.test_run import EXAMPLE, noeta

AT = datetime(2026, 12, 2, 10, 0, 1, 250000, tzinfo=UTC)


def stored(seq: int, event: events.Event, *, after: float = 0.0, epoch: int = 1) -> StoredEvent:
    kind, data = events.encode(event)
    owner = f"w{epoch}" if epoch else None
    at = AT + timedelta(seconds=after)
    return StoredEvent("t1", seq, kind, data, at, epoch, owner)


def printed(*log: StoredEvent) -> list[str]:
    printer = StepPrinter()
    return [line for event in log for line in printer.lines(event)]


def test_a_model_call_reads_as_one_step_with_its_tokens_and_latency() -> None:
    reply = events.ModelReplied(
        (Text("the answer"), ToolCall("c1", "Read", {"path": "notes.txt"})),
        "tool_use",
        Usage(input_tokens=12, output_tokens=30),
    )
    lines = printed(stored(3, events.ModelCalled("ab" * 32)), stored(4, reply, after=0.5))
    assert lines == [
        "      ── epoch 1: claimed by w1",
        "    3  10:00:01.250  model call",
        " " * 21 + "request abababababab",
        "    4  10:00:01.750  model reply",
        " " * 21 + "stop tool_use · tokens in 12 / out 30 · latency 0.50 s",
        " " * 21 + "│ the answer",
        " " * 21 + "calls Read (c1)",
        " " * 21 + '│ {"path": "notes.txt"}',
    ]


def test_a_reply_without_usage_reads_as_unknown_tokens_never_0() -> None:
    reply = events.ModelReplied((Text("hi"),), "end_turn", None)
    lines = printed(stored(3, events.ModelCalled("ab" * 32)), stored(4, reply, after=0.5))
    assert " " * 21 + "stop end_turn · tokens unknown (no usage in the reply) · latency 0.50 s" in (
        lines
    )


def test_a_tool_call_shows_its_input_and_folds_a_long_result() -> None:
    output = "\n".join(f"line {n}" for n in range(1, 21))
    lines = printed(
        stored(5, events.ToolStarted("c1", "Bash", {"command": "seq 20"})),
        stored(6, events.ToolFinished("c1", output), after=1.25),
    )
    assert lines[1:3] == [
        "    5  10:00:01.250  tool Bash (c1)",
        " " * 21 + '│ {"command": "seq 20"}',
    ]
    assert lines[3] == "    6  10:00:02.500  tool result (c1) after 1.25 s"
    assert lines[4:] == [" " * 21 + f"│ line {n}" for n in range(1, 7)] + [
        " " * 21 + "│ ... 14 more lines"
    ]
    assert not any(line.endswith("...") for line in lines)


def test_a_failed_attempt_reads_as_words() -> None:
    due = "2026-12-02T10:00:03.000+00:00"
    retried = events.AttemptFailed("job", 1, "ConnectionError: refused", 0.1234, due)
    assert printed(stored(5, retried))[1:] == [
        "    5  10:00:01.250  attempt failed (job)",
        " " * 21 + f"│ attempt 1 failed after 0.12s: ConnectionError: refused; next at {due}",
    ]
    last = events.AttemptFailed("job", 3, "ConnectionError: refused", 2.5)
    assert printed(stored(5, last))[-1].endswith(
        "attempt 3 failed after 2.50s: ConnectionError: refused; no attempt left"
    )


def test_a_takeover_and_a_failure_say_who_took_it_and_the_error() -> None:
    lines = printed(
        stored(3, events.ModelCalled("cd" * 32), epoch=1),
        stored(4, events.ModelCallCut(1, "worker_lost"), epoch=2),
        stored(5, events.TaskFinished("failed", error="llm_error: nope (HTTP 401)"), epoch=2),
    )
    assert (
        "      ── epoch 2: taken over by w2: epoch 1 on w1 ended mid-step after ModelCalled "
        "(a crash, a lost lease or a shutdown)"
    ) in lines
    assert "    4  10:00:01.250  model call cut" in lines
    assert lines[-2:] == [
        "    5  10:00:01.250  finished: failed",
        " " * 21 + "│ llm_error: nope (HTTP 401)",
    ]


def test_show_prints_steps_and_its_json_is_the_log_as_stored(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'noeta.db'}"
    ran = noeta("run", "What?", "--model", f"scripted:{EXAMPLE}", "--id", "demo", store=store)
    assert ran.returncode == 0, ran.stderr
    shown = noeta("show", "demo", store=store)
    assert shown.returncode == 0, shown.stderr
    titles = [
        line.split(maxsplit=2)[2]
        for line in shown.stdout.splitlines()[1:]
        if line[:5].strip().isdigit()
    ]
    assert titles[0] == "created" and titles[-1] == "finished: done"
    assert "model reply" in titles
    assert "latency" in shown.stdout and "tokens in" in shown.stdout
    document = json.loads(noeta("show", "demo", "--json", store=store).stdout)
    assert list(document) == ["task", "usage", "children", "log", "late_results"]
    assert [sorted(entry) for entry in document["log"]] == [["at", "data", "seq", "type"]] * 6
    assert [entry["type"] for entry in document["log"]] == [
        "TaskCreated",
        "PluginsPinned",
        "ModelCalled",
        "ModelReplied",
        "TurnEnded",
        "TaskFinished",
    ]
    assert document["log"][0]["data"]["prompt"] == "What?"


def test_claims_that_wrote_nothing_between_two_epochs_are_said() -> None:
    lines = printed(
        stored(2, events.ToolStarted("c1", "add", {}), epoch=1),
        stored(3, events.ToolStarted("c1", "add", {}), after=5, epoch=4),
    )
    assert lines[0] == "      ── epoch 1: claimed by w1"
    assert lines[3] == (
        "      ── epoch 4: taken over by w4: epoch 1 on w1 ended mid-step after ToolStarted "
        "(a crash, a lost lease or a shutdown) (epochs 2 to 3 claimed the task before and "
        "wrote nothing; the holder is not kept)"
    )


def test_show_says_which_worker_holds_a_task_it_has_written_nothing_to(tmp_path: Path) -> None:
    import asyncio

    from noeta.backends.stores import open_store
    from noeta.core.ports.store import NewEvent, NewTask

    url = f"sqlite:///{tmp_path / 'noeta.db'}"

    async def claimed_silently() -> None:
        store = await open_store(url, migrate=True)
        try:
            created = events.TaskCreated(model="scripted:x.yaml", prompt="hi")
            assert await store.create_task(NewTask("quiet", [NewEvent(*events.encode(created))]))
            assert await store.claim_task("lacks-plugin", "quiet", 600) is not None
        finally:
            await store.close()

    asyncio.run(claimed_silently())
    shown = noeta("show", "quiet", store=url)
    assert shown.returncode == 0, shown.stderr
    last = shown.stdout.splitlines()[-1]
    assert last.startswith(
        "      ── epoch 1: claimed by lacks-plugin after the last event; it holds the task, "
        "lease until "
    ), last
    assert last.endswith(
        "and has written nothing yet; lacks-plugin is not in the workers registry"
    ), last
    assert "silent" not in noeta("show", "quiet", "--json", store=url).stdout
