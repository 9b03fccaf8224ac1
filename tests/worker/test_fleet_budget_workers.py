"""A fleet budget on three real `noeta worker` processes, against the Anthropic fake at the
wire (issue 32's "done when"; ADR-0110): every worker takes from the same budget in the
append that records the call, so the fleet stops where one worker would, no call is sent
past a refusal, the budget holds the replies' real cost exactly, and the spend passes the
amount by at most one call's worth per call in flight when it ran out."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

import psycopg

from noeta.core.ports.fleet_budgets import FleetBudget, current_spend
from noeta.core.ports.model_limits import ModelLimiter
from noeta.core.ports.store import NewEvent, NewTask, Store
from noeta.core.rules import events
from noeta.core.rules.prices import BUNDLED, MILLION
from noeta.testing.fake_providers import FakeAnthropic, Reply

from .conftest import WorkerProcess, status_of, until

MODEL = "anthropic:claude-haiku-4-5"  # a bundled price: $1 in, $5 out per million
WORKERS = ("a", "b", "c")
TASKS = 24
AMOUNT = Decimal("1.00")
IDLE_WORKERS = "SELECT count(*) FROM idle_workers"
REPLY = Reply(text="done", input_tokens=100_000, output_tokens=10_000)  # $0.15 a call


async def test_a_budget_stops_the_fleet_at_the_right_call_on_every_worker(
    store: Store, postgres_url: str, workers: Callable[..., WorkerProcess]
) -> None:
    assert isinstance(store, ModelLimiter) and store.capabilities.workers is not None
    await store.set_fleet_budget(FleetBudget("default", "", "day", AMOUNT))
    with FakeAnthropic() as provider:
        provider.script(*[REPLY] * TASKS)
        env = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": provider.base_url}
        # One call at a time each, a lease no loaded machine lapses: three calls in flight
        # at most, and no re-sent request to blur the count.
        for name in WORKERS:
            workers(postgres_url, name, env=env, concurrency=1, lease=30)

        # Waiting in the idle registry, not only live: a worker is live (in `workers`)
        # before it warms up (about a second under load) and listens. A burst created
        # before then ran on the first worker ready, while the others warmed up (two
        # clean-clone CI runs: 'a' took none, then one took all 24).
        async def all_idle() -> bool:
            async with await psycopg.AsyncConnection.connect(postgres_url) as admin:
                row = await (await admin.execute(IDLE_WORKERS)).fetchone()
            return row is not None and row[0] == len(WORKERS)

        await until(all_idle, "every worker waits idle", within=60)
        ids = [f"t{n:02}" for n in range(TASKS)]
        created = events.TaskCreated(model=MODEL, prompt="hello", tools=())
        for task_id in ids:
            await store.create_task(NewTask(task_id, [NewEvent(*events.encode(created))]))

        async def all_finished() -> bool:
            return all([await status_of(store, t) in ("done", "failed") for t in ids])

        await until(all_finished, "every task has finished", within=120)
        billed = [
            (
                reply.input_tokens * BUNDLED[MODEL].input
                + reply.output_tokens * BUNDLED[MODEL].output
            )
            / MILLION
            for _, reply in provider.billed
        ]
        requests = len(provider.requests)

    logs = {t: [(e, events.decode(e.type, e.data)) for e in await store.read_log(t)] for t in ids}
    called = [(e.owner, d) for log in logs.values() for e, d in log if e.type == "ModelCalled"]
    refused = [
        (e.owner, d)
        for log in logs.values()
        for e, d in log
        if isinstance(d, events.BudgetExceeded)
    ]
    # No call sent that was not recorded, none recorded that was refused.
    assert requests == len(called) == len(billed)
    statuses = [await status_of(store, t) for t in ids]
    assert statuses.count("done") == len(called) and statuses.count("failed") == len(refused)
    assert refused, "the budget never ran out"
    # The budget holds the replies' real cost exactly, not the estimates.
    (budget,) = await store.fleet_budgets()
    spent = sum(billed, Decimal(0))
    assert current_spend(budget, await store.clock()) == spent
    assert (budget.calls, budget.refusals) == (len(called), len(refused))
    # Stopped at the right call: each refusal's period spend plus its request's estimate
    # would have passed the amount; and the fleet spent the budget (it did not stop early).
    for _, refusal in refused:
        assert refusal.fleet == "default --per-day" and refusal.limit == "1.00"
        estimate = refusal.estimate * BUNDLED[MODEL].input / MILLION
        assert Decimal(refusal.spent) + estimate > AMOUNT
    assert spent > AMOUNT - max(billed)
    # The overshoot: each call allowed on its estimate adds the rest after its reply; at
    # most the calls in flight when it ran out (three: one per worker) do.
    overshoot = spent - AMOUNT
    print(f"{len(called)} calls at $0.15, {len(refused)} refused; overshoot ${overshoot}")
    assert overshoot <= len(WORKERS) * max(billed)
    # Every worker took from the same budget: calls and refusals came from all three (each
    # of the first creates calls a worker waiting idle; ADR-0123).
    assert {owner for owner, _ in called + refused} == set(WORKERS)
