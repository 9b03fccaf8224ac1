"""Gates before a call runs: deny, rewrite, and ask — the call waits, a person answers."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from noeta.backends.models.registry import ProviderRegistry
from noeta.backends.stores import open_store
from noeta.core.ports.store import Delivery, Store
from noeta.core.rules.gates import GateRule
from noeta.core.runner.task import RunResult, TaskRunner

from .test_runner import Echo, create, run_once, script


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    store = await open_store(store_url, migrate=True)
    yield store
    await store.close()


def echo_call(text: str, call_id: str = "c1") -> dict[str, Any]:
    return {"tool_calls": [{"id": call_id, "name": "Echo", "input": {"text": text}}]}


async def run(store: Store, echo: Echo, gates: list[GateRule]) -> RunResult:
    runner = TaskRunner(store, ProviderRegistry(), {"Echo": echo}, gates=gates)
    return await run_once(runner, store, "t")


async def tool_log(store: Store) -> list[tuple[str, Any]]:
    return [(e.type, e.data) for e in await store.read_log("t") if e.type.startswith("Tool")]


async def test_a_deny_gate_stops_the_call_and_tells_the_model(store: Store, tmp_path: Path) -> None:
    model = script(tmp_path, echo_call("rm -rf /"), {"text": "ok, I won't"})
    await create(store, "t", model, prompt="go", tools=("Echo",))
    echo = Echo()
    gate = GateRule("deny", tool="Echo", field_name="text", pattern=r"rm\s+-rf", reason="no")
    result = await run(store, echo, [gate])
    assert result.state.finished == "done" and echo.runs == []
    (_, finished) = (await tool_log(store))[1]
    assert finished["is_error"] and finished["content"] == "Denied by a gate: no"


async def test_a_rewrite_gate_changes_the_call_and_the_log_says_so(
    store: Store, tmp_path: Path
) -> None:
    await create(
        store, "t", script(tmp_path, echo_call("loud"), {"text": "k"}), prompt="go", tools=("Echo",)
    )
    echo = Echo()
    gate = GateRule("rewrite", tool="Echo", set={"text": "quiet"})
    await run(store, echo, [gate])
    (_, started), (_, finished) = await tool_log(store)
    assert started["input"] == {"text": "quiet"} and finished["content"] == "echo: quiet"


@pytest.mark.parametrize("decision", ["allow", "deny"])
async def test_an_asked_call_waits_for_the_answer(
    store: Store, store_url: str, tmp_path: Path, decision: str
) -> None:
    model = script(tmp_path, echo_call("deploy"), {"text": "finished"})
    await create(store, "t", model, prompt="go", tools=("Echo",))
    echo = Echo()
    gates = [GateRule("ask", tool="Echo", reason="May I deploy?")]
    first = await run(store, echo, gates)
    assert first.outcome == "waiting" and first.state.waiting_call == "c1" and echo.runs == []
    await store.deliver(Delivery("t", {"text": "are you there?"}, dedupe_key="chat:1"))
    assert await store.claim("w", ["default"], 60) is None  # chat does not wake it

    answered = noeta_answer(store_url, "c1", decision, "--note", "go ahead")
    assert answered.returncode == 0, answered.stderr
    again = noeta_answer(store_url, "c1", decision)
    assert "not waiting" in again.stderr or "answered already" in again.stderr

    second = await run(store, echo, gates)
    assert second.state.finished == "done"
    kinds = [kind for kind, _ in await tool_log(store)]
    if decision == "allow":
        assert echo.runs == ["t:c1"]  # asked once; recovered or answered calls skip gates
        assert kinds == ["ToolWaiting", "ToolAnswered", "ToolStarted", "ToolFinished"]
    else:
        assert echo.runs == []
        assert kinds == ["ToolWaiting", "ToolAnswered"]
    # The chat sent while the call waited was neither taken as the answer nor lost.
    assert [entry.payload for entry in await store.read_inbox("t")] == [{"text": "are you there?"}]


def noeta_answer(store_url: str, call: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "noeta", "answer", "t", call, *arguments],
        env={**os.environ, "NOETA_STORE": store_url},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_answering_a_call_that_does_not_wait_is_a_clear_error(
    store: Store, store_url: str, tmp_path: Path
) -> None:
    await create(store, "t", script(tmp_path, {"text": "hi"}), prompt="go")
    result = noeta_answer(store_url, "c9", "allow")
    assert result.returncode == 1
    assert result.stderr.strip() == "noeta: error: task t is not waiting for an answer on call c9"
    assert json.loads(json.dumps(await store.read_inbox("t"), default=str)) == []


def test_a_gate_on_paths_outside_the_workspace(tmp_path: Path) -> None:
    from noeta.core.ports.tool import ToolContext
    from noeta.core.rules.gates import Ask, decide

    rule = GateRule("ask", tool="Write", field_name="path", outside_workspace=True)
    ctx = ToolContext("t", "c", workspace=str(tmp_path))
    (tmp_path / "link").symlink_to("/etc")
    for inside in ("a.txt", "sub/b.txt", "./c"):
        assert decide([rule], "Write", {"path": inside}, ctx)[0] == decide([], "", {}, ctx)[0]
    for outside in ("../x", "/etc/passwd", "link/passwd"):
        assert isinstance(decide([rule], "Write", {"path": outside}, ctx)[0], Ask)


def test_a_bad_gate_pattern_fails_when_configured() -> None:
    with pytest.raises(re.error, match="unterminated"):
        GateRule("deny", field_name="command", pattern="(unclosed")


async def test_input_that_breaks_the_schema_is_an_error_result_not_a_crash(
    store: Store, tmp_path: Path
) -> None:
    bad = {"tool_calls": [{"id": "c1", "name": "Echo", "input": {"text": 42}}]}
    await create(store, "t", script(tmp_path, bad, {"text": "sorry"}), prompt="go", tools=("Echo",))
    echo = Echo()
    echo.input_schema = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }
    result = await run(store, echo, [])
    assert result.state.finished == "done" and echo.runs == []
    (_, finished) = (await tool_log(store))[1]
    assert finished["is_error"]
    assert finished["content"] == "invalid input for Echo: text: 42 is not of type 'string'"


async def test_a_cancel_reaches_a_call_waiting_for_its_answer(store: Store, tmp_path: Path) -> None:
    await create(
        store,
        "t",
        script(tmp_path, echo_call("deploy"), {"text": "x"}),
        prompt="go",
        tools=("Echo",),
    )
    gates = [GateRule("ask", tool="Echo")]
    first = await run(store, Echo(), gates)
    assert first.outcome == "waiting"
    await store.deliver(Delivery("t", {"kind": "cancel"}, dedupe_key="cancel"))
    second = await run(store, Echo(), gates)
    assert second.state.finished == "cancelled"
