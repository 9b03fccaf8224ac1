"""The cluster run's late-result figures and its infrastructure check (counters.py): each
fate of a late tool result is told apart, a model call's word is no tool result, and a
task failed for the infrastructure is found."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from noeta.core.ports.store import LateResult, StoredEvent
from tests.cluster.counters import (
    infrastructure_failures,
    late_result_fates,
    late_result_ratio,
    requests_sent_twice_by_one_process,
    takeover_seconds,
)

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def log(task: str, *entries: tuple[str, dict[str, Any]]) -> list[StoredEvent]:
    return [StoredEvent(task, seq, kind, data, NOW) for seq, (kind, data) in enumerate(entries, 1)]


def kept(task: str, call: str) -> LateResult:
    return LateResult(task, call, "the result", False, 1, "w1", NOW)


def finished(call: str, recovery: str) -> tuple[str, dict[str, Any]]:
    return ("ToolFinished", {"call_id": call, "content": "x", "recovery": recovery})


def test_each_fate_of_a_late_result_is_counted() -> None:
    logs = {
        "a": log("a", finished("c1", "late"), finished("c2", "unknown"), finished("c3", "recover")),
        "b": log(
            "b",
            finished("c1", "unknown"),
            ("ToolResultCorrected", {"call_id": "c1", "content": "x", "from_epoch": 1}),
        ),
    }
    results = {
        "a": [kept("a", c) for c in ("c1", "c2", "c3", "noeta model call not sent, epoch 1")],
        "b": [kept("b", "c1")],
    }
    output = "task a: the result of c9 came after its claim was gone and could not be kept"
    fates = late_result_fates(logs, results, output)
    assert dict(+fates) == {
        "recorded late": 1,
        "corrected": 1,
        "settled unknown": 1,
        "settled by recover": 1,
        "never kept": 1,
    }
    assert late_result_ratio(fates) == (
        "2 of 4 reached the log as the real result (50 %): 1 recorded late, 1 corrected,"
        " 1 settled unknown, 1 never kept; 1 more settled by the tool's own recover or re-run"
    )


def test_a_failure_for_the_infrastructure_is_found() -> None:
    infra = "infrastructure: the workers running this call were lost 10 times (...)"
    logs = {
        "a": log("a", ("TurnEnded", {"outcome": "failed", "error": infra})),
        "b": log("b", ("TurnEnded", {"outcome": "failed", "error": "llm_error: the model"})),
    }
    (found,) = infrastructure_failures(logs)
    assert found.startswith("a: TurnEnded infrastructure:")


def called(seq: int, epoch: int, owner: str, at: float, sha: str = "ab") -> StoredEvent:
    moment = datetime.fromtimestamp(at, UTC)
    return StoredEvent("t", seq, "ModelCalled", {"request_sha256": sha}, moment, epoch, owner)


def test_a_request_sent_twice_by_one_process_is_found() -> None:
    starts = [("w1", 100.0), ("w2", 100.0), ("w1", 200.0)]  # w1 restarted at 200
    logs = {
        "t": [
            called(1, 1, "w1", 150.0),
            called(2, 2, "w2", 160.0),  # another worker: a takeover's re-send
            called(3, 3, "w1", 210.0),  # w1's next process: a re-send, not one process's
            called(4, 4, "w1", 220.0),  # the same process again: sent twice
            called(5, 5, "w1", 230.0),  # kept word it was never sent: not counted
        ]
    }
    kept = {"t": [LateResult("t", "noeta model call not sent, epoch 5", "x", False, 5, "w1")]}
    assert requests_sent_twice_by_one_process(logs, kept, starts) == ["t: seq 4 by w1"]


def test_a_takeover_is_timed_from_the_last_claim_that_held_the_task_not_its_last_write() -> None:
    # A chat task waits for its next message after epoch 2's turn; epoch 3 claims it for
    # the message and loses its connection before it writes; epoch 4 takes it over 1.1 s
    # later. The 23 s of waiting before epoch 3 are not takeover time.
    written = datetime(2026, 12, 7, 17, 33, 37).astimezone()
    logs = {"chat": [StoredEvent("chat", 5, "TurnEnded", {}, written, epoch=2)]}
    output = (
        "2026-12-07 17:34:00,384 INFO noeta.worker: claimed task chat (epoch 3)\n"
        "2026-12-07 17:34:01,490 INFO noeta.worker: took over task chat (epoch 4)\n"
    )
    assert takeover_seconds(logs, output) == [pytest.approx(1.106)]
    # Without the claim in between, the write is the last thing known held.
    assert takeover_seconds(logs, output.splitlines(keepends=True)[1]) == [pytest.approx(24.49)]
