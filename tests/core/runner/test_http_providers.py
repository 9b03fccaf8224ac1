"""Tasks end to end with each HTTP provider against its local fake server, on both stores;
and the byte-identical re-send after the process is really killed mid-call, or after an
upgrade (the first send a worker of the previous release's)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import cast

import pytest

from noeta.backends.models.anthropic import AnthropicProvider
from noeta.backends.models.openai import OpenAIProvider
from noeta.backends.stores import open_store
from noeta.config import Config
from noeta.core.ports.model import ModelReply, ModelRequest, OnDelta, Provider, ToolCall, Usage
from noeta.core.ports.model_limits import estimate_tokens
from noeta.core.ports.store import NewEvent, NewTask, Store
from noeta.core.rules import events
from noeta.core.runner.model_call import as_first_sent
from noeta.core.runner.task import TaskRunner
from noeta.plugins.toolbox import Toolbox
from noeta.testing.fake_providers import FakeAnthropic, FakeOpenAI, HttpError, Reply, Stall
from tests.backends.models.sample_requests import conversation

from .test_runner import Crash, Echo, Sleeps

API_KEY = "sk-test-not-a-real-key-0123456789"


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    store = await open_store(store_url, migrate=True)
    yield store
    await store.close()


@pytest.fixture(params=["anthropic", "openai"])
def fake(request: pytest.FixtureRequest) -> Iterator[tuple[str, FakeAnthropic | FakeOpenAI]]:
    server = FakeAnthropic() if request.param == "anthropic" else FakeOpenAI()
    with server:
        yield request.param, server


class Registry:
    def __init__(self, provider: Provider) -> None:
        self.provider = provider

    async def provider_for(self, spec: str) -> tuple[Provider, str]:
        return self.provider, spec.split(":", 1)[1]


def provider(kind: str, base_url: str) -> Provider:
    if kind == "anthropic":
        return AnthropicProvider(API_KEY, base_url=base_url, timeout_seconds=10)
    return OpenAIProvider(API_KEY, base_url=base_url, timeout_seconds=10)


async def test_a_task_with_a_tool_call_runs_end_to_end(
    store: Store, fake: tuple[str, FakeAnthropic | FakeOpenAI]
) -> None:
    kind, server = fake
    server.script(
        HttpError(429, retry_after="0"),
        Reply(text="Checking.", tool_calls=(ToolCall("call_1", "Echo", {"text": "hi"}),)),
        Reply(text="It said hi.", cache_read_tokens=7),
    )
    created = events.TaskCreated(model=f"{kind}:test-model", prompt="say hi", tools=("Echo",))
    await store.create_task(NewTask("t", [NewEvent(*events.encode(created))]))
    claim = await store.claim_task("w", "t", 60)
    assert claim is not None
    echo = Echo()
    chosen = provider(kind, server.base_url)
    try:
        runner = TaskRunner(store, Registry(chosen), {"Echo": echo}, sleep=Sleeps())
        result = await runner.run(claim)
    finally:
        await chosen.close()
    assert (result.state.finished, result.state.last_answer) == ("done", "It said hi.")
    assert echo.runs == ["t:call_1"]
    assert len(server.requests) == 3  # the 429, then two calls
    replies = [e.data for e in await store.read_log("t") if e.type == "ModelReplied"]
    assert replies[-1]["usage"]["cache_read_tokens"] == 7  # type: ignore[index]
    for event in await store.read_log("t"):
        assert API_KEY not in str(event.data)


async def test_the_log_keeps_each_replys_usage_as_sent_and_each_requests_estimate(
    store: Store, fake: tuple[str, FakeAnthropic | FakeOpenAI]
) -> None:
    """Cache and reasoning tokens in the fields each API sends them; a reply with no usage
    logged as unknown (null), never 0; each ModelCalled with its request's estimate."""
    kind, server = fake
    call = ToolCall("call_1", "Echo", {"text": "hi"})
    counts = {"input_tokens": 11, "output_tokens": 70, "cache_read_tokens": 300}
    if kind == "anthropic":
        counts["cache_write_tokens"] = 50
    else:
        counts["reasoning_tokens"] = 40
    server.script(Reply(tool_calls=(call,), **counts), Reply(text="done", with_usage=False))
    created = events.TaskCreated(model=f"{kind}:test-model", prompt="say hi", tools=("Echo",))
    await store.create_task(NewTask("u", [NewEvent(*events.encode(created))]))
    claim = await store.claim_task("w", "u", 60)
    assert claim is not None
    chosen = provider(kind, server.base_url)
    try:
        await TaskRunner(store, Registry(chosen), {"Echo": Echo()}, sleep=Sleeps()).run(claim)
    finally:
        await chosen.close()
    logged = [events.decode(e.type, e.data) for e in await store.read_log("u")]
    replies = [e.usage for e in logged if isinstance(e, events.ModelReplied)]
    assert replies == [Usage(**counts), None]
    estimates = [e.input_estimate for e in logged if isinstance(e, events.ModelCalled)]
    assert estimates == [estimate_tokens(request.body) for request in server.requests]


async def test_each_retry_is_one_log_line_with_the_attempt_the_reason_and_the_wait(
    store: Store, fake: tuple[str, FakeAnthropic | FakeOpenAI], caplog: pytest.LogCaptureFixture
) -> None:
    """A 429 (its Retry-After honoured), then a 500, then the reply: two lines, one per
    retry, none for the reply; no key, no provider words, no request in them."""
    kind, server = fake
    secret_words = "the provider said something long about the request"
    server.script(
        HttpError(
            429, retry_after="7", body=json.dumps({"error": {"message": secret_words}}).encode()
        ),
        HttpError(500),
        Reply(text="done after retries"),
    )
    created = events.TaskCreated(model=f"{kind}:test-model", prompt="a private prompt")
    await store.create_task(NewTask("r", [NewEvent(*events.encode(created))]))
    claim = await store.claim_task("w", "r", 60)
    assert claim is not None
    chosen = provider(kind, server.base_url)
    sleeps = Sleeps()
    caplog.set_level(logging.WARNING, logger="noeta.core.retry")
    try:
        result = await TaskRunner(store, Registry(chosen), {}, sleep=sleeps).run(claim)
    finally:
        await chosen.close()
    assert result.state.last_answer == "done after retries"
    lines = [r.getMessage() for r in caplog.records if r.name == "noeta.core.retry"]
    assert len(lines) == 2 == len(sleeps.delays), lines
    assert lines[0] == (
        f"task r: {kind} model call attempt 1 of 9 failed (HTTP 429); retrying in 7.0 s"
    )
    assert lines[1].startswith(f"task r: {kind} model call attempt 2 of 9 failed (HTTP 500); ")
    assert lines[1].endswith(f"retrying in {sleeps.delays[1]:.1f} s")
    assert sleeps.delays[0] == 7.0
    for line in lines:
        assert API_KEY not in line and secret_words not in line and "private" not in line


async def test_the_request_resent_after_a_kill_is_byte_identical_and_billed_once(
    postgres_url: str, fake: tuple[str, FakeAnthropic | FakeOpenAI], tmp_path: Path
) -> None:
    """A real SIGKILL between ModelCalled and ModelReplied, a takeover that sends the
    request again: the same bytes, and the cost `noeta show` says equals the bill computed
    from the fake's own records, the unanswered request counted once as possibly billed."""
    kind, server = fake
    counts = {"input_tokens": 120, "output_tokens": 9, "cache_read_tokens": 3000}
    if kind == "anthropic":
        counts["cache_write_tokens"] = 700
    server.script(Stall(), Reply(text="4", **counts))
    env = {**os.environ, "NOETA_STORE": postgres_url, "NOETA_HOME": str(tmp_path)}
    if kind == "anthropic":
        env |= {"ANTHROPIC_API_KEY": API_KEY, "ANTHROPIC_BASE_URL": server.base_url}
    else:
        env |= {"OPENAI_API_KEY": API_KEY, "OPENAI_BASE_URL": server.base_url}
    store = await open_store(postgres_url, migrate=True)
    child = subprocess.Popen(  # noqa: ASYNC220 - killed below, never waited on blocking
        [
            sys.executable,
            "-m",
            "noeta",
            "run",
            "2+2?",
            "--model",
            f"{kind}:test-model",
            "--id",
            "k",
            "--lease",
            "1",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        await until(lambda: len(server.requests) == 1, "the first request to arrive")
        child.send_signal(signal.SIGKILL)  # dead between ModelCalled and ModelReplied
        await asyncio.to_thread(child.wait, 30)
        log = await store.read_log("k")
        assert [e.type for e in log] == ["TaskCreated", "PluginsPinned", "ModelCalled"]

        claim = None
        while claim is None:  # the dead process's lease runs out on the database clock
            claim = await store.claim_task("w2", "k", 60)
            await asyncio.sleep(0.05)
        chosen = provider(kind, server.base_url)
        # The same plugins as the dead process (pinned in the log), so the same tools.
        toolbox = await Toolbox.open(Config(workspaces=str(tmp_path)))
        try:
            runner = TaskRunner(
                store,
                Registry(chosen),
                toolbox.tools,
                sleep=Sleeps(),
                workspaces=toolbox.workspaces,
                pins=toolbox.pins,
            )
            result = await runner.run(claim)
        finally:
            await chosen.close()
            await toolbox.close()
        assert (result.state.finished, result.state.last_answer) == ("done", "4")
        first, second = server.requests[0], server.requests[1]
        assert first.body == second.body
        called = [
            e.data["request_sha256"]
            for e in await store.read_log("k")  # type: ignore[index]
            if e.type == "ModelCalled"
        ]
        assert len(called) == 2 and called[0] == called[1]
    finally:
        if child.poll() is None:
            child.kill()
        await store.close()
    await _show_bills_what_the_fake_billed(kind, server, env, tmp_path)


@dataclass
class PreviousRelease:
    """A worker of the release before streaming, whose every request asked for the reply
    whole; it dies once its request is out."""

    inner: Provider
    name: str

    def encode_request(self, request: ModelRequest, *, stream: bool = True) -> bytes:
        return self.inner.encode_request(request, stream=False)

    async def send(self, body: bytes, on_delta: OnDelta | None = None) -> ModelReply:
        raise Crash

    async def close(self) -> None:
        return None


async def test_a_request_an_older_worker_sent_whole_is_resent_whole_after_the_upgrade(
    store: Store, fake: tuple[str, FakeAnthropic | FakeOpenAI]
) -> None:
    """SPEC §4: a re-send is byte-identical to the first send, even when the first was a
    worker of the previous release: the bytes its ModelCalled recorded, not today's
    streamed form."""
    kind, server = fake
    server.script(Reply(text="4"))
    created = events.TaskCreated(model=f"{kind}:test-model", prompt="2+2?")
    await store.create_task(NewTask("o", [NewEvent(*events.encode(created))]))
    current = provider(kind, server.base_url)
    older = await store.claim_task("older", "o", 60)
    assert older is not None
    with pytest.raises(Crash):
        await TaskRunner(store, Registry(PreviousRelease(current, kind))).run(older)
    assert await store.release(older)  # as its lease running out would
    (first,) = await requests_recorded(store, "o")
    heir = await store.claim_task("current", "o", 60)
    assert heir is not None
    try:
        result = await TaskRunner(store, Registry(current), sleep=Sleeps()).run(heir)
    finally:
        await current.close()
    assert (result.state.finished, result.state.last_answer) == ("done", "4")
    (resent,) = server.requests
    assert hashlib.sha256(resent.body).hexdigest() == first
    assert "stream" not in json.loads(resent.body)  # answered whole, as first asked
    assert await requests_recorded(store, "o") == [first, first]


def test_a_request_the_log_now_assembles_otherwise_is_sent_as_it_is_now() -> None:
    """A first ModelCalled no form of today's request matches (a late result told since
    changed the request): the request is sent as this release encodes it now."""
    chosen = AnthropicProvider(API_KEY)
    streamed = chosen.encode_request(conversation())
    whole = chosen.encode_request(conversation(), stream=False)
    for recorded, sent in [("", streamed), (whole, whole), (streamed, streamed), (b"x", streamed)]:
        sha = hashlib.sha256(recorded).hexdigest() if recorded else ""
        assert as_first_sent(chosen, conversation(), sha) == sent


async def requests_recorded(store: Store, task_id: str) -> list[str]:
    log = await store.read_log(task_id)
    return [cast(dict[str, str], e.data)["request_sha256"] for e in log if e.type == "ModelCalled"]


# USD per million tokens, by kind: set in noeta.yaml, as an operator would.
PRICES = {
    "input": Decimal(3),
    "output": Decimal(15),
    "cache_read": Decimal("0.3"),
    "cache_write": Decimal("3.75"),
}


async def _show_bills_what_the_fake_billed(
    kind: str, server: FakeAnthropic | FakeOpenAI, env: dict[str, str], tmp_path: Path
) -> None:
    billed = [reply for _, reply in server.billed]
    assert len(server.requests) == 2 and len(billed) == 1  # the first was never answered
    bill = Decimal(0)
    for reply in billed:  # the fake's records: what each wire usage field said
        bill += reply.input_tokens * PRICES["input"] + reply.output_tokens * PRICES["output"]
        bill += reply.cache_read_tokens * PRICES["cache_read"]
        bill += reply.cache_write_tokens * PRICES["cache_write"]
    # The estimate's documented rule: a token per 4 bytes of the request, rounded up.
    possibly = -(-len(server.requests[0].body) // 4) * PRICES["input"]
    config = tmp_path / "prices.yaml"
    prices = ", ".join(f"{name}: {price}" for name, price in PRICES.items())
    config.write_text(f"prices:\n  {kind}:test-model: {{{prices}}}\n")
    shown = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "noeta", "show", "k", "--config", str(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    total = re.search(
        r"^usage \(with subtasks\): cost \$(\S+) \+ possibly billed \$(\S+)$", shown.stdout, re.M
    )
    assert total is not None, shown.stdout
    assert Decimal(total.group(1)) == bill / 1_000_000
    assert Decimal(total.group(2)) == (possibly / 1_000_000).quantize(Decimal("0.000001"))
    assert "1 reply" in shown.stdout and "possibly billed: 1 request" in shown.stdout


async def until(condition: object, what: str, within: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not condition():  # type: ignore[operator]
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)
