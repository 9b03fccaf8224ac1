"""A task's own budget against the Anthropic fake at the wire (usage as the API sends it):
the call that would exceed it is not sent, the refusal is logged, the task fails naming
the budget; a call's overshoot stays within that call's worth; and a request whose
reply never came (a real SIGKILL, then a takeover) counts once, at its estimate."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from noeta.backends.models.anthropic import AnthropicProvider
from noeta.backends.stores import open_store
from noeta.client import messages
from noeta.core.ports.model import ToolCall
from noeta.core.ports.store import NewEvent, NewTask, Store
from noeta.core.rules import events
from noeta.core.rules.prices import BUNDLED
from noeta.core.rules.texts import BUDGET_CALL
from noeta.core.runner.task import TaskRunner
from noeta.core.task_loading import load_state, snapshot_version
from noeta.testing.fake_providers import FakeAnthropic, Reply, Stall
from tests.core.runner.crash_child import LedgerTool
from tests.core.runner.test_http_providers import API_KEY, Registry, until
from tests.core.runner.test_runner import Echo, Sleeps

REPOSITORY = Path(__file__).parents[3]
MODEL = "anthropic:claude-haiku-4-5"  # a bundled price: $1 in, $5 out per million


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    store = await open_store(store_url, migrate=True)
    yield store
    await store.close()


@pytest.fixture
def server() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        yield fake


def echo_reply(n: int, input_tokens: int, output_tokens: int) -> Reply:
    call = ToolCall(f"call_{n}", "Echo", {"text": str(n)})
    return Reply(tool_calls=(call,), input_tokens=input_tokens, output_tokens=output_tokens)


async def run_task(store: Store, server: FakeAnthropic, task_id: str) -> list[events.Event]:
    claim = await store.claim_task("w", task_id, 60)
    assert claim is not None
    provider = AnthropicProvider(API_KEY, base_url=server.base_url, timeout_seconds=10)
    try:
        await TaskRunner(store, Registry(provider), {"Echo": Echo()}, sleep=Sleeps()).run(claim)
    finally:
        await provider.close()
    logged = [events.decode(e.type, e.data) for e in await store.read_log(task_id)]
    return [e for e in logged if not isinstance(e, events.UnknownEvent)]


async def create(store: Store, task_id: str, **budget: object) -> None:
    created = events.TaskCreated(model=MODEL, prompt="go", tools=("Echo",), **budget)  # type: ignore[arg-type]
    await store.create_task(NewTask(task_id, [NewEvent(*events.encode(created))]))


async def test_max_tokens_stops_the_task_at_the_call_that_would_exceed_it(
    store: Store, server: FakeAnthropic
) -> None:
    """1,100 tokens a reply and a budget of 2,250: the third request (estimated at more
    than the 50 left) is not sent; the refusal says what the replies spent, exactly."""
    server.script(*(echo_reply(n, 1000, 100) for n in range(5)))
    await create(store, "tok", budget_tokens=2250)
    logged = await run_task(store, server, "tok")

    assert len(server.requests) == 2
    refused = [e for e in logged if isinstance(e, events.BudgetExceeded)]
    billed = sum(reply.input_tokens + reply.output_tokens for _, reply in server.billed)
    assert [(r.budget, r.spent, r.limit) for r in refused] == [("tokens", str(billed), "2250")]
    assert billed + refused[0].estimate > 2250
    finished = logged[-1]
    assert isinstance(finished, events.TaskFinished) and finished.status == "failed"
    assert finished.error.startswith("budget_exceeded: --max-tokens 2250: 2200 tokens spent")


async def test_max_cost_stops_the_task_and_overshoots_by_at_most_one_calls_worth(
    store: Store, server: FakeAnthropic
) -> None:
    """$0.15 a call against $0.40: three calls go (the third allowed on its estimate),
    the fourth is not sent; the spend passes the budget by less than the last call."""
    server.script(*(echo_reply(n, 100_000, 10_000) for n in range(6)))
    await create(store, "usd", budget_cost="0.40")
    logged = await run_task(store, server, "usd")

    assert len(server.requests) == 3
    price = BUNDLED[MODEL]
    costs = [
        (reply.input_tokens * price.input + reply.output_tokens * price.output) / 1_000_000
        for _, reply in server.billed
    ]
    spent = sum(costs, Decimal(0))
    refused = [e for e in logged if isinstance(e, events.BudgetExceeded)]
    assert [(r.budget, Decimal(r.spent), r.limit) for r in refused] == [("cost", spent, "0.40")]
    overshoot = spent - Decimal("0.40")
    assert Decimal(0) < overshoot <= costs[-1]  # the bound: one call's worth
    finished = logged[-1]
    assert isinstance(finished, events.TaskFinished) and finished.status == "failed"
    assert finished.error.startswith("budget_exceeded: --max-cost 0.40: $0.450000 spent")


async def test_a_call_killed_before_its_reply_counts_once_toward_the_budget(
    postgres_url: str, server: FakeAnthropic, tmp_path: Path
) -> None:
    """A real SIGKILL while the request waits at the provider; the takeover finds the call
    cut, sends it again and runs on: the refusal's spend is the reply's tokens plus the
    unanswered request's estimate, once (not twice, not zero)."""
    server.script(Stall(), echo_reply(1, 19_000, 1000))
    store = await open_store(postgres_url, migrate=True)
    try:
        created = events.TaskCreated(
            model=MODEL, prompt="go", tools=("Lookup",), budget_tokens=20_000
        )
        await store.create_task(NewTask("kill", [NewEvent(*events.encode(created))]))
        env = {**os.environ, "ANTHROPIC_API_KEY": API_KEY, "ANTHROPIC_BASE_URL": server.base_url}
        ledger = tmp_path / "ledger"
        command = [sys.executable, "-m", "tests.core.runner.crash_child", postgres_url, "kill"]
        child = subprocess.Popen(  # noqa: ASYNC220 - killed below, never waited on blocking
            [*command, str(ledger)], cwd=REPOSITORY, env=env, stdout=subprocess.DEVNULL
        )
        try:
            await until(lambda: len(server.requests) == 1, "the first request to arrive")
            child.send_signal(signal.SIGKILL)
            await asyncio.to_thread(child.wait, 30)
        finally:
            if child.poll() is None:
                child.kill()
        for claim in await store.owned_by("crash-child"):
            assert await store.release(claim)  # the dead process's: freed, not waited out
        claim = await store.claim_task("w2", "kill", 60)
        assert claim is not None
        provider = AnthropicProvider(API_KEY, base_url=server.base_url, timeout_seconds=10)
        try:
            tools = {"Lookup": LedgerTool("Lookup", ledger)}
            await TaskRunner(store, Registry(provider), tools, sleep=Sleeps()).run(claim)
        finally:
            await provider.close()
        logged = [events.decode(e.type, e.data) for e in await store.read_log("kill")]
    finally:
        await store.close()
    called = [e for e in logged if isinstance(e, events.ModelCalled)]
    cuts = [e for e in logged if isinstance(e, events.ModelCallCut)]
    assert len(called) == 2 and [c.cause for c in cuts] == ["worker_lost"]
    unanswered = called[0].input_estimate
    assert unanswered > 0
    refused = [e for e in logged if isinstance(e, events.BudgetExceeded)]
    assert [(r.budget, r.spent) for r in refused] == [("tokens", str(20_000 + unanswered))]
    assert len(server.requests) == 2  # the stalled one and its re-send; no third


async def test_on_budget_ask_waits_for_an_answer_and_allow_lets_one_more_call_go(
    store: Store, server: FakeAnthropic
) -> None:
    """The refused call waits as a gate's question does; `allow` sends it (one call past
    the budget), and the task goes on to its answer."""
    server.script(echo_reply(1, 1000, 100), echo_reply(2, 1000, 100), Reply(text="done"))
    await create(store, "ask", budget_tokens=2250, on_budget="ask")
    logged = await run_task(store, server, "ask")
    assert len(server.requests) == 2
    assert isinstance(logged[-1], events.BudgetExceeded)  # and nothing after it: it waits
    state = await load_state(store, "ask", snapshot_version())
    assert state.waiting_call == BUDGET_CALL
    assert state.waiting_question.startswith("--max-tokens 2250: 2200 tokens spent")

    async def opened() -> Store:
        return store

    await messages.answer(opened, "ask", BUDGET_CALL, "allow", "")
    logged = await run_task(store, server, "ask")
    assert len(server.requests) == 3
    finished = logged[-1]
    assert isinstance(finished, events.TaskFinished)
    assert (finished.status, finished.answer) == ("done", "done")


async def test_on_budget_ask_denied_fails_the_task_naming_the_budget(
    store: Store, server: FakeAnthropic
) -> None:
    server.script(echo_reply(1, 1000, 100), echo_reply(2, 1000, 100))
    await create(store, "deny", budget_tokens=2250, on_budget="ask")
    await run_task(store, server, "deny")

    async def opened() -> Store:
        return store

    await messages.answer(opened, "deny", BUDGET_CALL, "deny", "too dear")
    logged = await run_task(store, server, "deny")
    assert len(server.requests) == 2
    finished = logged[-1]
    assert isinstance(finished, events.TaskFinished) and finished.status == "failed"
    assert finished.error.startswith("budget_exceeded: --max-tokens 2250: 2200 tokens spent")
    assert finished.error.endswith("(a person denied more: too dear)")


async def test_max_cost_on_a_model_with_no_price_sends_nothing(
    store: Store, server: FakeAnthropic
) -> None:
    """Its cost is unknown, never 0: the first call is refused, saying why."""
    created = events.TaskCreated(model="anthropic:no-such-model", prompt="go", budget_cost="1")
    await store.create_task(NewTask("np", [NewEvent(*events.encode(created))]))
    logged = await run_task(store, server, "np")
    assert server.requests == []
    finished = logged[-1]
    assert isinstance(finished, events.TaskFinished) and finished.status == "failed"
    assert finished.error.startswith(
        "budget_exceeded: --max-cost 1: an unknown amount (the model has no price) spent"
    )
