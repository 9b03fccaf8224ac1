"""The event encoding: exact round trips, and the unknown-event path for newer versions."""

from __future__ import annotations

import pytest

from noeta.core.ports import payload
from noeta.core.ports.model import Text, ToolCall, Usage
from noeta.core.ports.pin import Pin
from noeta.core.rules import snapshot
from noeta.core.rules.events import (
    BUDGET_VERSION,
    EVENT_TYPES,
    WORKSPACE_COPY_VERSION,
    AttemptFailed,
    BudgetExceeded,
    CallRequested,
    CanvasRequested,
    JobFinished,
    JobLost,
    JobStarted,
    JobStopped,
    MessageTaken,
    ModelCallCut,
    ModelCalled,
    ModelFailed,
    ModelReplied,
    PluginRecord,
    PluginsPinned,
    SubtaskLaunched,
    SubtaskOf,
    SubtaskReturned,
    TaskCreated,
    TaskFinished,
    ToolAnswered,
    ToolFinished,
    ToolResultCorrected,
    ToolStarted,
    ToolWaiting,
    TurnEnded,
    UnknownEvent,
    WakeupScheduled,
    WokenUp,
    decode,
    encode,
)
from noeta.core.rules.fold import LoggedEvent, fold

EXAMPLES = [
    TaskCreated("scripted:x.yaml", "prompt \x00 with NUL", True, "system", 100, ("Bash", "Read")),
    MessageTaken(3, "lone \udc80 surrogate"),
    ModelCalled("ab" * 32),
    ModelCalled("cd" * 32, "", 1234),
    ModelReplied((Text("thought hard"),), "end_turn", Usage(5, 900, 0, 0, 640)),
    ModelReplied((Text("no usage said"),), "end_turn", None),
    ModelReplied(
        (Text("let me"), ToolCall("c1", "Bash", {"command": "ls", "n": [1, 2.5, None]})),
        "tool_use",
        Usage(1, 2, 3, 4),
        "tool_use",
        "msg_1",
    ),
    ModelFailed("HTTP 401: invalid x-api-key", 1),
    TaskCreated("anthropic:m", "go", budget_tokens=200_000, budget_cost="0.50", on_budget="ask"),
    BudgetExceeded("cost", "0.450000", 812, "0.40"),
    ToolStarted("c1", "Bash", {"command": "ls"}),
    ToolFinished("c1", "out", False, "rerun"),
    ToolWaiting("c1", "Bash", {"command": "rm -rf build"}, "May this Bash call run?"),
    ToolAnswered("c1", "deny", "not today", 12),
    PluginsPinned((Pin("core", "module:noeta.plugins.core", "0.1.0", "ab12"),)),
    JobStarted("c1", "sleep 5 &"),
    JobFinished("c1", 0, "out \x00", 13),
    JobLost("c2"),
    JobStopped("c3"),
    WakeupScheduled("c3", "2026-11-30T01:00:00.000+00:00", "check the deploy"),
    WokenUp("c3"),
    SubtaskOf("parent", "c4", 1),
    CallRequested("job", "charge", {"customer": "ada", "cents": 500}),
    CallRequested("job", "charge", {"customer": "ada", "cents": 5}, retry_of="a1b2c3"),
    AttemptFailed("job", 1, "ConnectionError: refused", 0.25, "2026-12-01T10:00:03.000+00:00"),
    AttemptFailed("job", 3, "ConnectionError: refused", 0.25),
    SubtaskLaunched("c4", "t.c4.1", "look it up"),
    SubtaskReturned("t.c4.1", "done", 8),
    SubtaskReturned("t.m0.1", "done", 9, report="[1, 2]"),
    CanvasRequested({"jobs": {"add": ["m", "module:m", "1", "h"]}, "tree": {"group": []}}),
    PluginRecord("notify", {"through": 12}),
    ModelCallCut(3, "worker_lost"),
    ToolResultCorrected("c1", "the real result", False, 2),
    TurnEnded("failed", "", "llm_error: x"),
    TaskFinished("done", "4", ""),
]


def test_every_event_type_has_an_example() -> None:
    assert {type(example).__name__ for example in EXAMPLES} == set(EVENT_TYPES)


@pytest.mark.parametrize("event", EXAMPLES, ids=lambda e: type(e).__name__)
def test_events_round_trip_exactly_through_the_stored_form(event: object) -> None:
    event_type, data = encode(event)  # type: ignore[arg-type]
    stored = payload.decode(payload.encode(data))
    assert decode(event_type, stored) == event


def test_a_pin_is_stored_as_its_four_strings_as_before_pin_was_a_type() -> None:
    pinned = PluginsPinned((Pin("core", "module:noeta.plugins.core", "0.1.0", "ab12"),))
    stored = '{"v":1,"pins":[["core","module:noeta.plugins.core","0.1.0","ab12"]]}'
    assert payload.encode(encode(pinned)[1]) == stored
    assert decode("PluginsPinned", payload.decode(stored)) == pinned


def test_an_unknown_type_is_left_for_a_newer_version() -> None:
    assert decode("Telepathy", {"v": 1}) == UnknownEvent("Telepathy", 1)


def test_a_newer_encoding_of_a_known_type_is_left_for_a_newer_version() -> None:
    assert decode("ModelCalled", {"v": 2, "request_sha256": "x"}) == UnknownEvent("ModelCalled", 2)


@pytest.mark.parametrize(
    "data", [None, [], {"request_sha256": "x"}, {"v": 1}, {"v": "1", "request_sha256": "x"}]
)
def test_malformed_data_of_a_known_type_is_an_error(data: object) -> None:
    with pytest.raises(ValueError):
        decode("ModelCalled", data)  # type: ignore[arg-type]


def test_a_snapshot_round_trips_the_folded_state() -> None:
    logged = [LoggedEvent(seq, event) for seq, event in enumerate(EXAMPLES[:7], start=1)]
    state = fold(logged)
    assert state.messages and state.started == () and state.taken_inbox == frozenset({3})
    assert snapshot.load(snapshot.dump(state)) == state


def test_a_task_created_with_its_workers_tools_is_read_only_by_a_noeta_that_knows_it() -> None:
    created = TaskCreated(model="scripted:x", prompt="hi", tools=None)
    kind, data = encode(created)
    assert data["v"] == 2 and data["tools"] is None
    assert decode(kind, data) == created
    assert created.tool_names(["Read", "Bash"]) == ("Read", "Bash")
    # Its own list (as before, version 1) stays its own on any worker.
    listed = TaskCreated(model="scripted:x", tools=("Read",))
    assert encode(listed)[1]["v"] == 1
    assert listed.tool_names(["Read", "Bash"]) == ("Read",)
    # A noeta that read only version 1 saw a version 2 event as a newer noeta's; this one
    # so sees a version past the newest it knows (4, a budget).
    assert isinstance(decode(kind, {**data, "v": BUDGET_VERSION + 1}), UnknownEvent)


def test_a_task_created_with_a_budget_is_left_alone_by_a_noeta_before_budgets() -> None:
    budgeted = TaskCreated(model="anthropic:m", budget_cost="0.50")
    kind, data = encode(budgeted)
    assert (data["v"], data["budget_cost"]) == (BUDGET_VERSION, "0.50")
    assert "budget_tokens" not in data and "on_budget" not in data
    assert decode(kind, data) == budgeted
    # The newest version a noeta before budgets knew was a copied workspace's.
    assert data["v"] > WORKSPACE_COPY_VERSION
    # Without one, a TaskCreated is stored as before: no field, its old version.
    assert set(encode(TaskCreated(model="anthropic:m"))[1]) == {
        "v",
        "model",
        "prompt",
        "interactive",
        "system",
        "max_tokens",
        "tools",
    }


def test_a_task_created_with_a_copied_workspace_is_read_only_by_a_noeta_that_knows_it() -> None:
    copied = TaskCreated(model="scripted:x", tools=None, forked_from="t", workspace_from="t")
    kind, data = encode(copied)
    assert (data["v"], data["workspace_from"]) == (WORKSPACE_COPY_VERSION, "t")
    assert decode(kind, data) == copied
    # Without it, a TaskCreated is stored as before: no field, its old version.
    fresh = TaskCreated(model="scripted:x", tools=None, forked_from="t")
    assert "workspace_from" not in encode(fresh)[1] and encode(fresh)[1]["v"] == 2


def test_a_reply_with_the_four_counts_is_stored_as_before_reasoning_tokens() -> None:
    stored = (
        '{"v":1,"content":[],"stop_reason":"end_turn","usage":{"input_tokens":1,'
        '"output_tokens":2,"cache_read_tokens":3,"cache_write_tokens":4},'
        '"provider_stop_reason":"","response_id":""}'
    )
    replied = ModelReplied((), "end_turn", Usage(1, 2, 3, 4))
    assert payload.encode(encode(replied)[1]) == stored
    assert decode("ModelReplied", payload.decode(stored)) == replied


@pytest.mark.parametrize("usage", [Usage(5, 900, reasoning_tokens=640), None])
def test_reasoning_or_unknown_usage_is_read_only_by_a_noeta_that_knows_it(
    usage: Usage | None,
) -> None:
    """A noeta before them would fail to read that usage (its log unreadable): version 2
    makes it leave the task to a newer worker instead (ADR-0097, kind 2)."""
    _, data = encode(ModelReplied((), "end_turn", usage))
    assert data["v"] == 2
    assert decode("ModelReplied", data) == ModelReplied((), "end_turn", usage)
    assert decode("ModelReplied", {**data, "v": 3}) == UnknownEvent("ModelReplied", 3)


def test_a_call_without_an_estimate_is_stored_as_before_it() -> None:
    assert encode(ModelCalled("ab"))[1] == {"v": 1, "request_sha256": "ab", "trace": ""}
    assert encode(ModelCalled("ab", "", 7))[1]["input_estimate"] == 7
