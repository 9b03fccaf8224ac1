"""The runner end to end with the scripted model, on sqlite and PostgreSQL: turns, tools,
and every cap of SPEC §6 that lives in the kernel, each reached."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from noeta.backends.models.registry import ProviderRegistry
from noeta.backends.models.scripted import ScriptedProvider
from noeta.backends.stores import open_store
from noeta.core.ports.model import ModelReply, OnDelta, Provider, ProviderError
from noeta.core.ports.payload import JSONValue
from noeta.core.ports.store import Delivery, NewEvent, NewTask, Store, StoredEvent
from noeta.core.ports.tool import ToolContext, ToolFlags, ToolOutput
from noeta.core.retry import BACKOFF_CAP_SECONDS, DEFAULT_MAX_ATTEMPTS
from noeta.core.rules import events
from noeta.core.rules.texts import (
    MAX_MODEL_ATTEMPTS,
    MAX_WORKERS_LOST,
    MODEL_KEPT_BEING_INTERRUPTED,
)
from noeta.core.runner.task import RunResult, TaskRunner

LEASE = 60.0


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    store = await open_store(store_url, migrate=True)
    yield store
    await store.close()


def script(tmp_path: Path, *replies: dict[str, Any]) -> str:
    path = tmp_path / f"script-{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(json.dumps({"replies": list(replies)}))  # JSON is YAML
    return f"scripted:{path}"


@dataclass
class Echo:
    """A tool that records every run, so a test can count side effects."""

    name: str = "Echo"
    description: str = "Echoes its text."
    input_schema: dict[str, JSONValue] = field(
        default_factory=lambda: {"type": "object", "properties": {"text": {"type": "string"}}}
    )
    flags: ToolFlags = field(default_factory=ToolFlags)
    runs: list[str] = field(default_factory=list)

    async def run(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput:
        self.runs.append(ctx.idempotency_key)
        return ToolOutput(f"echo: {input['text']}")


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


async def create(store: Store, task_id: str, model: str, **config: Any) -> None:
    created = events.TaskCreated(model=model, **config)
    assert await store.create_task(NewTask(task_id, [NewEvent(*events.encode(created))]))


async def run_once(runner: TaskRunner, store: Store, task_id: str) -> RunResult:
    claim = await store.claim_task("worker-1", task_id, LEASE)
    assert claim is not None, f"task {task_id} is not claimable"
    return await runner.run(claim)


def types(log: list[StoredEvent]) -> list[str]:
    return [event.type for event in log]


async def test_a_one_shot_task_answers_and_ends_done(store: Store, tmp_path: Path) -> None:
    await create(store, "t", script(tmp_path, {"text": "4"}), prompt="2+2?")
    result = await run_once(TaskRunner(store, ProviderRegistry()), store, "t")
    assert (result.outcome, result.state.finished, result.state.last_answer) == (
        "finished",
        "done",
        "4",
    )
    assert types(await store.read_log("t")) == [
        "TaskCreated",
        "ModelCalled",
        "ModelReplied",
        "TurnEnded",
        "TaskFinished",
    ]
    assert (await store.get_task("t")).status.value == "done"  # type: ignore[union-attr]


async def test_tool_calls_run_once_each_in_order_and_go_back_to_the_model(
    store: Store, tmp_path: Path
) -> None:
    model = script(
        tmp_path,
        {
            "tool_calls": [
                {"id": "c1", "name": "Echo", "input": {"text": "a"}},
                {"id": "c2", "name": "Nope", "input": {}},
                {"id": "c3", "name": "Echo", "input": {"text": "b"}},
            ]
        },
        {"text": "done"},
    )
    await create(store, "t", model, prompt="go", tools=("Echo",))
    echo = Echo()
    registry = ProviderRegistry()
    result = await run_once(TaskRunner(store, registry, {"Echo": echo}), store, "t")
    assert result.state.finished == "done" and echo.runs == ["t:c1", "t:c3"]
    log = await store.read_log("t")
    finished = [e.data for e in log if e.type == "ToolFinished"]
    assert [(f["call_id"], f["is_error"]) for f in finished] == [  # type: ignore[index]
        ("c1", False),
        ("c2", True),
        ("c3", False),
    ]
    provider, _ = await registry.provider_for(model)
    assert isinstance(provider, ScriptedProvider)
    second_request = json.loads(provider.requests[1])
    results = second_request["messages"][-1]["content"]
    assert [r["result"] for r in results] == ["c1", "c2", "c3"]
    assert "no tool named 'Nope'" in results[1]["content"]


async def test_three_truncated_replies_fail_the_turn(store: Store, tmp_path: Path) -> None:
    cut = {"text": "and then", "stop": "max_tokens"}
    await create(store, "t", script(tmp_path, cut, cut, cut, {"text": "never"}), prompt="go")
    result = await run_once(TaskRunner(store, ProviderRegistry()), store, "t")
    assert result.state.finished == "failed"
    assert result.state.last_turn_error.startswith("llm_truncated")


async def test_two_truncations_then_an_answer_is_fine(store: Store, tmp_path: Path) -> None:
    cut = {"text": "part", "stop": "max_tokens"}
    await create(store, "t", script(tmp_path, cut, cut, {"text": "whole"}), prompt="go")
    result = await run_once(TaskRunner(store, ProviderRegistry()), store, "t")
    assert (result.state.finished, result.state.last_answer) == ("done", "whole")


async def test_three_empty_replies_end_the_turn_without_an_answer(
    store: Store, tmp_path: Path
) -> None:
    empty = {"empty": True}
    await create(store, "t", script(tmp_path, empty, empty, empty), prompt="go")
    result = await run_once(TaskRunner(store, ProviderRegistry()), store, "t")
    turn_ended = [e.data for e in await store.read_log("t") if e.type == "TurnEnded"]
    assert turn_ended[0]["outcome"] == "no_answer"  # type: ignore[index]
    assert (result.state.finished, result.state.last_answer) == ("done", "")


async def test_provider_errors_are_retried_with_capped_backoff_honouring_retry_after(
    store: Store, tmp_path: Path
) -> None:
    failures = [{"status": 529}] * 6 + [{"status": 429, "retry_after": 42}, {"status": 503}]
    model = script(tmp_path, {"text": "finally", "fail_first": failures})
    await create(store, "t", model, prompt="go")
    sleeps = Sleeps()
    result = await run_once(TaskRunner(store, ProviderRegistry(), sleep=sleeps), store, "t")
    assert (result.state.finished, result.state.last_answer) == ("done", "finally")
    assert len(sleeps.delays) == DEFAULT_MAX_ATTEMPTS - 1
    assert sleeps.delays[6] == 42  # Retry-After, as the server said
    assert all(d <= BACKOFF_CAP_SECONDS for i, d in enumerate(sleeps.delays) if i != 6)
    assert sleeps.delays[5] > sleeps.delays[0]
    # Retries inside one call are not model attempts: one ModelCalled, one reply.
    assert types(await store.read_log("t")).count("ModelCalled") == 1


async def test_a_ninth_failure_fails_the_turn_with_llm_error(store: Store, tmp_path: Path) -> None:
    failures = [{"status": 500, "retry_after": 0}] * DEFAULT_MAX_ATTEMPTS
    await create(store, "t", script(tmp_path, {"text": "x", "fail_first": failures}), prompt="go")
    result = await run_once(TaskRunner(store, ProviderRegistry(), sleep=Sleeps()), store, "t")
    assert result.state.finished == "failed"
    assert result.state.last_turn_error.startswith("llm_error:")
    failed = [e.data for e in await store.read_log("t") if e.type == "ModelFailed"]
    assert failed[0]["attempts"] == DEFAULT_MAX_ATTEMPTS  # type: ignore[index]


async def test_a_permanent_provider_error_is_not_retried(store: Store, tmp_path: Path) -> None:
    model = script(tmp_path, {"text": "x", "fail_first": [{"status": 401, "message": "bad key"}]})
    await create(store, "t", model, prompt="go")
    sleeps = Sleeps()
    result = await run_once(TaskRunner(store, ProviderRegistry(), sleep=sleeps), store, "t")
    assert result.state.finished == "failed" and sleeps.delays == []
    assert "bad key" in result.state.last_turn_error


class Crash(BaseException):
    """Stands in for the process dying mid-call: nothing after it runs or is written."""


@dataclass
class CrashingProvider:
    """Wraps a provider; the first `crashes` sends die after the request went out."""

    inner: Provider
    crashes: int
    name: str = "scripted"
    bodies: list[bytes] = field(default_factory=list)

    def encode_request(self, request: Any, *, stream: bool = True) -> bytes:
        return self.inner.encode_request(request, stream=stream)

    async def send(self, body: bytes, on_delta: OnDelta | None = None) -> ModelReply:
        self.bodies.append(body)
        if len(self.bodies) <= self.crashes:
            raise Crash
        return await self.inner.send(body)

    async def close(self) -> None:
        await self.inner.close()


@dataclass
class Fixed:
    provider: Any

    async def provider_for(self, spec: str) -> tuple[Any, str]:
        return self.provider, "model"


async def run_through_crashes(store: Store, runner: TaskRunner, task_id: str) -> RunResult:
    """Run, and after each simulated death hand the task to the next claimer."""
    while True:
        claim = await store.claim_task("worker-1", task_id, LEASE)
        assert claim is not None
        try:
            return await runner.run(claim)
        except Crash:
            assert await store.release(claim)


async def test_a_request_that_kills_every_worker_it_touches_fails_at_the_infrastructure_cap(
    store: Store, tmp_path: Path
) -> None:
    # Each death takes the worker's only claim with it: its worker was lost, which is not
    # the model's fault, but a request that kills every worker still fails its turn.
    model = script(tmp_path, {"text": "never reached"})
    await create(store, "t", model, prompt="go")
    crashing = CrashingProvider(ScriptedProvider.from_file(model.split(":", 1)[1]), crashes=99)
    result = await run_through_crashes(store, TaskRunner(store, Fixed(crashing)), "t")
    assert len(crashing.bodies) == MAX_WORKERS_LOST and len(set(crashing.bodies)) == 1
    assert result.state.finished == "failed"
    assert result.state.last_turn_error.startswith(
        f"infrastructure: the workers running this call were lost {MAX_WORKERS_LOST} times"
        " (0 of them before the request was sent;"
    )
    log = await store.read_log("t")
    called = [e.data["request_sha256"] for e in log if e.type == "ModelCalled"]  # type: ignore[index]
    assert len(called) == MAX_WORKERS_LOST and len(set(called)) == 1
    cuts = [e.data["cause"] for e in log if e.type == "ModelCallCut"]  # type: ignore[index]
    assert cuts == ["worker_lost"] * MAX_WORKERS_LOST


async def test_a_request_cut_three_times_while_its_workers_lived_on_fails_as_the_models(
    store: Store, tmp_path: Path
) -> None:
    # The poison case: the worker holds another task's live claim through every cut.
    model = script(tmp_path, {"text": "never reached"})
    await create(store, "t", model, prompt="go")
    await create(store, "other", model, prompt="go")
    other = await store.claim_task("worker-1", "other", LEASE)
    assert other is not None
    # It works on the other task (writes under that claim) before the request is sent.
    await store.append(other, 1, [NewEvent(*events.encode(events.PluginRecord("p", 1)))])
    crashing = CrashingProvider(ScriptedProvider.from_file(model.split(":", 1)[1]), crashes=99)
    result = await run_through_crashes(store, TaskRunner(store, Fixed(crashing)), "t")
    assert len(crashing.bodies) == MAX_MODEL_ATTEMPTS and len(set(crashing.bodies)) == 1
    assert result.state.finished == "failed"
    assert result.state.last_turn_error == MODEL_KEPT_BEING_INTERRUPTED
    assert MODEL_KEPT_BEING_INTERRUPTED.startswith(
        "llm_error: the model call kept being interrupted (3 times"
    )
    log = await store.read_log("t")
    assert [e.data["cause"] for e in log if e.type == "ModelCallCut"] == ["call"] * 3  # type: ignore[index]


async def test_two_interruptions_then_a_reply_is_fine(store: Store, tmp_path: Path) -> None:
    model = script(tmp_path, {"text": "made it"})
    await create(store, "t", model, prompt="go")
    crashing = CrashingProvider(ScriptedProvider.from_file(model.split(":", 1)[1]), crashes=2)
    result = await run_through_crashes(store, TaskRunner(store, Fixed(crashing)), "t")
    assert (result.state.finished, result.state.last_answer) == ("done", "made it")


@dataclass
class BuggyProvider:
    name: str = "buggy"

    def encode_request(self, request: Any, *, stream: bool = True) -> bytes:
        return b"{}"

    async def send(self, body: bytes, on_delta: OnDelta | None = None) -> ModelReply:
        raise ZeroDivisionError("a bug")

    async def close(self) -> None:
        return None


async def test_a_bug_fails_the_turn_and_a_second_in_a_row_fails_the_task(store: Store) -> None:
    await create(store, "t", "buggy:x", interactive=True)
    runner = TaskRunner(store, Fixed(BuggyProvider()))
    await store.deliver(Delivery("t", {"text": "first"}))
    first = await run_once(runner, store, "t")
    assert first.outcome == "waiting" and first.state.last_turn_error.startswith("internal_error")
    await store.deliver(Delivery("t", {"text": "second"}))
    second = await run_once(runner, store, "t")
    assert second.state.finished == "failed"
    assert "ZeroDivisionError" in second.state.last_turn_error


async def test_an_interactive_task_takes_each_message_once_and_waits(
    store: Store, tmp_path: Path
) -> None:
    await create(store, "t", script(tmp_path, {"text": "one"}, {"text": "two"}), interactive=True)
    runner = TaskRunner(store, ProviderRegistry())
    await store.deliver(Delivery("t", {"text": "hello"}, dedupe_key="m1"))
    await store.deliver(Delivery("t", {"text": "again"}, dedupe_key="m2"))
    result = await run_once(runner, store, "t")
    assert result.outcome == "waiting" and result.state.turn == 2
    taken = [e.data["inbox_id"] for e in await store.read_log("t") if e.type == "MessageTaken"]  # type: ignore[index]
    assert len(taken) == 2 and len(set(taken)) == 2
    assert await store.read_inbox("t") == []
    assert await store.claim("w", ["default"], LEASE) is None


async def test_a_newer_versions_log_is_left_alone(store: Store, tmp_path: Path) -> None:
    await create(store, "t", script(tmp_path, {"text": "x"}), prompt="go")
    claim = await store.claim_task("w", "t", LEASE)
    assert claim is not None
    await store.append(claim, 1, [NewEvent("FromTheFuture", {"v": 1})])
    result = await TaskRunner(store, ProviderRegistry()).run(claim)
    assert result.outcome == "left_for_newer"
    assert len(await store.read_log("t")) == 2


async def test_an_unreadable_log_fails_the_task_after_three_claims(
    store: Store, tmp_path: Path
) -> None:
    await create(store, "t", script(tmp_path, {"text": "x"}), prompt="go")
    claim = await store.claim_task("w", "t", LEASE)
    assert claim is not None
    await store.append(claim, 1, [NewEvent("ModelCalled", {"v": 1})])  # a field missing
    await store.release(claim)
    runner = TaskRunner(store, ProviderRegistry())
    outcomes = []
    for _ in range(3):  # each claim leaves the task; the lease lapsing is a release here
        claim = await store.claim_task("worker-1", "t", LEASE)
        assert claim is not None
        outcomes.append((await runner.run(claim)).outcome)
        if outcomes[-1] == "unreadable":
            assert len(await store.read_log("t")) == 2  # it wrote nothing
            await store.release(claim)
    assert outcomes == ["unreadable", "unreadable", "finished"]
    finished = (await store.read_log("t"))[-1]
    assert finished.type == "TaskFinished" and "unreadable_log" in finished.data["error"]  # type: ignore[index]


async def test_a_snapshot_is_written_and_resuming_from_it_equals_folding_it_all(
    store: Store, tmp_path: Path
) -> None:
    replies = [
        {"tool_calls": [{"id": f"c{n}", "name": "Echo", "input": {"text": str(n)}}]}
        for n in range(5)
    ] + [{"text": "end"}]
    await create(store, "t", script(tmp_path, *replies), prompt="go", tools=("Echo",))
    runner = TaskRunner(store, ProviderRegistry(), {"Echo": Echo()}, snapshot_every=4)
    result = await run_once(runner, store, "t")
    from noeta.core.task_loading import load_state, snapshot_version

    version = snapshot_version()
    snap = await store.get_snapshot("t", version)
    assert snap is not None and 4 <= snap.seq <= result.state.last_seq
    assert await load_state(store, "t", version) == result.state
    assert await load_state(store, "t", "another-version") == result.state


async def test_the_snapshot_cadence_counts_the_log_not_one_claims_run(
    store: Store, tmp_path: Path
) -> None:
    """A task claimed for a step at a time (a canvas's, ADR-0117; a chat's turn) is
    snapshotted every `snapshot_every` events of its log, not only after a run that
    wrote that many: else its every claim reads and folds the whole log."""
    from noeta.core.task_loading import load_state, snapshot_version

    await create(
        store, "t", script(tmp_path, *({"text": str(n)} for n in range(4))), interactive=True
    )
    runner = TaskRunner(store, ProviderRegistry(), snapshot_every=6)
    written = []
    for n in range(4):
        await store.deliver(Delivery("t", {"text": f"m{n}"}, dedupe_key=f"m{n}"))
        before = (await store.get_task("t")).last_seq  # type: ignore[union-attr]
        result = await run_once(runner, store, "t")
        assert result.outcome == "waiting"
        written.append(result.state.last_seq - before)
    assert max(written) < 6  # no one run wrote a snapshot's worth
    snap = await store.get_snapshot("t", snapshot_version())
    assert snap is not None and 6 <= snap.seq <= result.state.last_seq
    assert await load_state(store, "t", snapshot_version()) == result.state


async def test_provider_error_messages_reach_the_log_not_the_key() -> None:
    error = ProviderError("HTTP 401: invalid x-api-key", retryable=False, status=401)
    assert "sk-" not in str(error)


async def test_a_cancel_request_finishes_the_task_as_cancelled(
    store: Store, tmp_path: Path
) -> None:
    await create(store, "t", script(tmp_path, {"text": "never"}), interactive=True)
    await store.deliver(Delivery("t", {"kind": "cancel"}, dedupe_key="cancel"))
    result = await run_once(TaskRunner(store, ProviderRegistry()), store, "t")
    assert result.state.finished == "cancelled"
    assert (await store.get_task("t")).status.value == "cancelled"  # type: ignore[union-attr]
    assert await store.read_inbox("t") == []
