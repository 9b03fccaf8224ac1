"""The three recovery paths of a half-done tool call, with the process really SIGKILLed
at a named failure point and another process folding the log (SPEC §4)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from noeta.backends.stores import open_store
from noeta.core.ports.store import NewEvent, NewTask
from noeta.core.ports.tool import MAX_ATTEMPTS, OUTCOME_UNKNOWN
from noeta.core.rules import events
from noeta.core.rules.texts import MAX_MODEL_ATTEMPTS, MAX_WORKERS_LOST

REPOSITORY = Path(__file__).parents[3]


async def start_task(url: str, tmp_path: Path, tool: str) -> None:
    script = tmp_path / "model.yaml"
    replies = [{"tool_calls": [{"id": "call-1", "name": tool, "input": {}}]}, {"text": "ok"}]
    script.write_text(json.dumps({"replies": replies}))
    created = events.TaskCreated(model=f"scripted:{script}", prompt="go", tools=(tool,))
    store = await open_store(url, migrate=True)
    try:
        await store.create_task(NewTask("t", [NewEvent(*events.encode(created))]))
    finally:
        await store.close()


def child(url: str, ledger: Path, failpoints: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NOETA_FAILPOINTS": failpoints}
    return subprocess.run(
        [sys.executable, "-m", "tests.core.runner.crash_child", url, "t", str(ledger)],
        cwd=REPOSITORY,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def tool_events(url: str) -> list[tuple[str, dict[str, object]]]:
    store = await open_store(url)
    try:
        log = await store.read_log("t")
    finally:
        await store.close()
    return [(e.type, e.data) for e in log if e.type.startswith("Tool")]  # type: ignore[misc]


def effects(ledger: Path) -> list[str]:
    return ledger.read_text().splitlines() if ledger.exists() else []


def killed(result: subprocess.CompletedProcess[str]) -> bool:
    return result.returncode == -signal.SIGKILL


async def test_an_ordinary_tool_gets_the_unknown_outcome_and_never_runs_twice(
    postgres_url: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    await start_task(postgres_url, tmp_path, "Charge")
    assert killed(child(postgres_url, ledger, "tool.before_finished=kill"))
    assert effects(ledger) == ["t:call-1 Charge"]  # it did take effect, then died
    finished = child(postgres_url, ledger)
    assert finished.stdout.split() == ["finished", "done"], finished.stderr
    (start, end) = await tool_events(postgres_url)
    assert start[0] == "ToolStarted" and end[0] == "ToolFinished"
    assert end[1]["recovery"] == "unknown" and end[1]["content"] == OUTCOME_UNKNOWN
    assert end[1]["is_error"] is True
    assert effects(ledger) == ["t:call-1 Charge"]  # never executed twice


async def test_a_tool_with_recover_returns_what_it_found(postgres_url: str, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    await start_task(postgres_url, tmp_path, "Pay")
    assert killed(child(postgres_url, ledger, "tool.before_finished=kill"))
    assert child(postgres_url, ledger).returncode == 0
    *_, end = await tool_events(postgres_url)
    assert end[1]["recovery"] == "recover"
    assert end[1]["content"] == "Pay done (found by recover)"
    assert effects(ledger) == ["t:call-1 Pay"]


async def test_recover_finding_nothing_falls_back_to_the_unknown_outcome(
    postgres_url: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    await start_task(postgres_url, tmp_path, "Pay")
    assert killed(child(postgres_url, ledger, "tool.after_started=kill"))
    assert child(postgres_url, ledger).returncode == 0
    *_, end = await tool_events(postgres_url)
    assert end[1]["recovery"] == "unknown"
    assert effects(ledger) == []


async def test_a_retry_safe_tool_starts_again_and_stops_at_three_starts(
    postgres_url: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    await start_task(postgres_url, tmp_path, "Lookup")
    for _ in range(MAX_ATTEMPTS):
        assert killed(child(postgres_url, ledger, "tool.after_started=kill"))
    assert child(postgres_url, ledger).returncode == 0
    tool_log = await tool_events(postgres_url)
    assert [kind for kind, _ in tool_log] == ["ToolStarted"] * MAX_ATTEMPTS + ["ToolFinished"]
    assert tool_log[-1][1]["recovery"] == "unknown"


async def test_a_retry_safe_tool_rerun_after_a_crash_finishes(
    postgres_url: str, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    await start_task(postgres_url, tmp_path, "Lookup")
    assert killed(child(postgres_url, ledger, "tool.before_finished=kill"))
    assert child(postgres_url, ledger).returncode == 0
    *_, end = await tool_events(postgres_url)
    assert end[1]["recovery"] == "rerun" and end[1]["content"] == "Lookup done"
    # Re-running is what retry_safe promises is harmless: two lookups, no harm done.
    assert effects(ledger) == ["t:call-1 Lookup", "t:call-1 Lookup"]


@pytest.mark.parametrize("spec", ["tool.after_started=explode", "x=sleep(abc)", "=kill"])
def test_a_bad_failpoint_spec_is_a_clear_error(spec: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", "import noeta.core.failpoints"],
        env={**os.environ, "NOETA_FAILPOINTS": spec},
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.returncode != 0 and "NOETA_FAILPOINTS: cannot read" in result.stderr) or (
        "takes milliseconds" in result.stderr
    )


async def test_a_model_call_survives_more_sigkilled_workers_than_the_old_cap(
    postgres_url: str, tmp_path: Path
) -> None:
    # Issue 26, item 1: each process is SIGKILLed after its request went out; the old
    # cap of 3 failed the turn at the third. Their loss is the infrastructure's: the
    # model's cap is not spent, and the next process gets the model's answer.
    ledger = tmp_path / "ledger"
    script = tmp_path / "model.yaml"
    script.write_text(json.dumps({"replies": [{"text": "made it"}]}))
    created = events.TaskCreated(model=f"scripted:{script}", prompt="go")
    store = await open_store(postgres_url, migrate=True)
    try:
        await store.create_task(NewTask("t", [NewEvent(*events.encode(created))]))
    finally:
        await store.close()
    for _ in range(MAX_MODEL_ATTEMPTS + 2):
        assert killed(child(postgres_url, ledger, "model.after_called=kill"))
    finished = child(postgres_url, ledger)
    assert finished.stdout.split() == ["finished", "done"], finished.stderr
    store = await open_store(postgres_url)
    try:
        log = await store.read_log("t")
    finally:
        await store.close()
    assert [e.data["cause"] for e in log if e.type == "ModelCallCut"] == ["worker_lost"] * (  # type: ignore[index]
        MAX_MODEL_ATTEMPTS + 2
    )
    assert [e.type for e in log][-2:] == ["TurnEnded", "TaskFinished"]


async def test_a_request_that_kills_every_worker_it_touches_still_fails_its_turn(
    postgres_url: str, tmp_path: Path
) -> None:
    # Each process is SIGKILLed with the request out; the one after the tenth finds the
    # workers lost MAX_WORKERS_LOST times and fails the turn, saying so, unsent.
    ledger = tmp_path / "ledger"
    await start_task(postgres_url, tmp_path, "Charge")
    for _ in range(MAX_WORKERS_LOST):
        assert killed(child(postgres_url, ledger, "model.after_called=kill"))
    failed = child(postgres_url, ledger)
    assert failed.stdout.split() == ["finished", "failed"], failed.stderr
    store = await open_store(postgres_url)
    try:
        log = await store.read_log("t")
    finally:
        await store.close()
    assert [e.type for e in log].count("ModelCalled") == MAX_WORKERS_LOST
    error = log[-1].data["error"]  # type: ignore[index]
    assert error.startswith(
        f"infrastructure: the workers running this call were lost {MAX_WORKERS_LOST} times"
    )
    assert effects(ledger) == []
