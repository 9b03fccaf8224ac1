"""Shared model-call limits (ADR-0075): the fleet's request rate against a provider's
limit, and what taking the budget adds to the ModelCalled append.

1. Fleet rate: `noeta worker` processes (3, --concurrency 4 each) run one-model-call
   tasks against a fake Anthropic at 127.0.0.1 that allows R requests a second (a token
   bucket of R, answering 429 with Retry-After beyond it), with `noeta limit set
   anthropic/fake-model --rpm 60*R`. The rate is the provider's own: arrivals after the
   first second (each worker's first call is late: its HTTP client starts), over their
   span. Targets: within 5 % of the limit, no 429 after the first.
2. Append cost: one client appends ModelCalled events to its claimed task, N times each
   way: `Store.append` (no limits), `append_model_called` with no limit set, and with a
   limit that never refuses (rpm 10^9, so every call takes the budget). Median µs and the
   ratio to the plain append.

Run:  .venv/bin/python bench/model_limits.py [--quick] [--dsn DSN]
The machine's load is printed beside each table; the figures are noisy on a busy machine.
It always exits 0: PASS/MISS compare with targets, they are not a test.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import fresh_schema, parser, server  # the sibling module (bench/ is on sys.path)

from noeta.backends.stores.postgres import PostgresStore
from noeta.core.ports.model_limits import ModelBudget, limit_keys
from noeta.core.ports.store import NewEvent, NewTask
from noeta.core.rules import events
from noeta.testing.fake_providers import FakeAnthropic

MODEL = "fake-model"
WORKERS = 3
CONCURRENCY = 4


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def noeta(url: str, *arguments: str) -> None:
    environment = {k: v for k, v in os.environ.items() if k != "NOETA_STORE"}
    command = [sys.executable, "-m", "noeta", "--store", url, *arguments]
    subprocess.run(command, check=True, capture_output=True, env=environment)


def start_worker(url: str, name: str, folder: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "noeta", "worker", "--store", url, "--name", name]
    output = (folder / f"{name}.log").open("w")
    return subprocess.Popen(
        [*command, "--concurrency", str(CONCURRENCY)],
        stdout=output,
        stderr=subprocess.STDOUT,
        env=env,
    )


async def fleet_rate(url: str, store: PostgresStore, per_second: int, tasks: int) -> None:
    noeta(url, "limit", "set", f"anthropic/{MODEL}", "--rpm", str(per_second * 60))
    ids = [f"rate-{per_second}-{n:04}" for n in range(tasks)]
    for task_id in ids:
        created = events.TaskCreated(model=f"anthropic:{MODEL}", prompt="hello", tools=())
        await store.create_task(NewTask(task_id, [NewEvent(*events.encode(created))]))
    folder = Path(tempfile.mkdtemp(prefix="noeta-bench-limits-"))
    with FakeAnthropic() as provider:
        provider.limit_rate(per_second, retry_after="1")
        env = {
            **{k: v for k, v in os.environ.items() if k != "NOETA_STORE"},
            "ANTHROPIC_API_KEY": "bench-key",
            "ANTHROPIC_BASE_URL": provider.base_url,
            "NOETA_HOME": str(folder / "home"),
        }
        fleet = [start_worker(url, f"w{n}", folder, env) for n in range(WORKERS)]
        try:
            while True:
                finished = [await store.get_task(task_id) for task_id in ids]
                if all(t is not None and t.status.value in ("done", "failed") for t in finished):
                    break
                await asyncio.sleep(0.2)
        finally:
            for process in fleet:
                process.terminate()
            for process in fleet:
                process.wait(30)
    failed = sum(1 for t in finished if t is not None and t.status.value == "failed")
    arrivals = provider.arrivals
    first = arrivals[0][0]
    steady = [t for t, _ in arrivals if t >= first + 1.0]
    rate = (len(steady) - 1) / (steady[-1] - steady[0]) if len(steady) > 1 else 0.0
    throttled = sum(1 for _, status in arrivals if status == 429)
    after_first = max(0, throttled - 1)
    off = (rate - per_second) / per_second * 100
    verdict = "PASS" if abs(off) <= 5 and after_first == 0 and failed == 0 else "MISS"
    print(
        f"{per_second:>9}/s  {tasks:>6}  {rate:>10.2f}/s  {off:>+7.1f} %  "
        f"{throttled:>5}  {failed:>6}  {verdict}"
    )


async def append_cost(url: str, count: int) -> None:
    """The three ways take turns, append by append, so that the machine's drift and the
    tables' growth fall on each alike."""
    store = await PostgresStore.open(url, max_connections=1)
    ways = ("plain append", "no limit set", "with a limit")
    try:
        claims, budgets = {}, {}
        for way in ways:
            task_id = f"append-{way.replace(' ', '-')}"
            created = NewEvent(*events.encode(events.TaskCreated(model="m", prompt="p")))
            await store.create_task(NewTask(task_id, [created]))
            claim = await store.claim_task("bench", task_id, 600)
            assert claim is not None
            claims[way] = claim
            keys = limit_keys("anthropic", f"bench-{way.replace(' ', '-')}")
            if way == "with a limit":
                await store.set_model_limit(keys[0], 1_000_000_000, None)
            budgets[way] = ModelBudget(keys, 1000)
        event = [NewEvent("ModelCalled", {"request_hash": "0" * 64, "span": {}})]
        timings: dict[str, list[float]] = {way: [] for way in ways}
        for seq in range(1, count + 1):
            for way in ways:
                started = time.perf_counter()
                if way == "plain append":
                    await store.append(claims[way], seq, event)
                else:
                    await store.append_model_called(claims[way], seq, event, budgets[way])
                timings[way].append(time.perf_counter() - started)
        results = {way: statistics.median(timings[way][count // 10 :]) * 1e6 for way in ways}
        base = results["plain append"]
        print(f"{'append':<14}  {'median µs':>9}  {'ratio':>5}   (load {load()})")
        for way, micros in results.items():
            print(f"{way:<14}  {micros:>9.0f}  {micros / base:>5.2f}")
    finally:
        await store.close()


async def main() -> None:
    arguments = parser(__doc__).parse_args()
    quick: bool = arguments.quick
    with server(arguments.dsn) as dsn:
        async with fresh_schema(dsn) as (url, _):
            store = await PostgresStore.open(url)
            try:
                print(f"\nFleet rate: {WORKERS} workers x {CONCURRENCY}, one call per task")
                print(
                    f"{'limit':>11}  {'tasks':>6}  {'measured':>12}  {'off':>9}  "
                    f"{'429s':>5}  {'failed':>6}   (load {load()})"
                )
                for per_second in (10,) if quick else (10, 20):
                    await fleet_rate(url, store, per_second, 40 if quick else 20 * per_second)
            finally:
                await store.close()
            print("\nModelCalled append cost, one client (target: ratio <= 1.2)")
            await append_cost(url, 200 if quick else 2000)


if __name__ == "__main__":
    asyncio.run(main())
