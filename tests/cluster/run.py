"""`make cluster`: several `noeta worker --lease 1` processes and a scheduler on one
PostgreSQL store, under process, database and network faults, then the checks (SPEC §9).

    NOETA_CLUSTER_SEED=7 NOETA_CLUSTER_TASKS=40 NOETA_CLUSTER_SECONDS=60 make cluster

Phases: targeted scenarios (targeted.py: the fence's window, a stale view), chaos
(faults.py, while workload.py creates tasks, sends messages and cancels some parents
mid-fan-out), heal (no faults; every task must finish within FINISH_WITHIN seconds of the
last fault), then the checks (checks.py, invariants.py, tree_checks.py for subagents,
hook_checks.py for the example notify plugin every worker loads) and the minimum chaos
(counters.py): each fault kind landed and
each recovery path was taken, or the run fails. A failing run prints its seed and its
fault timeline first. The same seed replays the same tasks and fault choices (where they
land in each task still depends on timing). Exit 0 if everything held.
Server: NOETA_TEST_POSTGRES_DSN (no restarts then), else an embedded PostgreSQL.
`--pgbouncer` (`make cluster-short CLUSTER_ARGS=--pgbouncer`): workers and the scheduler
pool through a PgBouncer in transaction mode (ADR-0106), restarted once mid-chaos.
Mutants of the store's SQL: NOETA_CLUSTER_MUTANT (see mutants.py); such a run stops at
the first problem a task's log shows (early_stop.py), as any does with
NOETA_CLUSTER_STOP_EARLY=1.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, NoReturn

from noeta.backends.stores import open_store
from noeta.backends.stores.embedded import make_home
from noeta.testing.pgbouncer import PgBouncer, pgbouncer_binary
from tests.cluster import canvases, counters, takeovers
from tests.cluster.checks import check
from tests.cluster.early_stop import EarlyChecks
from tests.cluster.fanout import OUTBOX
from tests.cluster.faults import Chaos
from tests.cluster.hook_checks import EVENTS, counted
from tests.cluster.mutants import apply_mutant
from tests.cluster.processes import WORKERS, Cluster
from tests.cluster.server import ClusterServer, ServerUnanswered
from tests.cluster.targeted import ScenarioFailed, run_targeted
from tests.cluster.workload import KINDS, SCRIPTS, Workload, plan_tasks, steadily

# After the last fault every task is done within this (mutant runs use less: they fail).
FINISH_WITHIN = float(os.environ.get("NOETA_CLUSTER_FINISH_WITHIN") or 180)
CLAIM_REPLY_LOST = "claim: the commit's outcome is unknown"


class BadSetting(Exception):
    pass


def settings(env: dict[str, str]) -> tuple[int, int, float, str]:
    """Seed, tasks, seconds and mutant from the environment; BadSetting says which is wrong."""

    def number(name: str, default: str, kind: type[int] | type[float]) -> float:
        text = env.get(name) or default
        try:
            value = kind(text)
        except ValueError:
            raise BadSetting(f"{name} must be a number, not {text!r}") from None
        if value <= 0 and name != "NOETA_CLUSTER_SEED":
            raise BadSetting(f"{name} must be above 0, not {text!r}")
        return value

    seed = int(number("NOETA_CLUSTER_SEED", str(random.randrange(1_000_000)), int))
    count = int(number("NOETA_CLUSTER_TASKS", "24", int))
    # A minute of chaos crosses at least one minute boundary: one cron fire, or more.
    seconds = number("NOETA_CLUSTER_SECONDS", "60", float)
    return seed, count, seconds, env.get("NOETA_CLUSTER_MUTANT", "")


def write_configs(scratch: Path) -> None:
    (scratch / "ledger").touch()
    # Bash sees only an allowlisted environment, and writes only its workspace (Landlock):
    # the ledger's path is passed and opened to it explicitly.
    ledger = [str(scratch / "ledger")]
    params = {"pass_env": ["NOETA_CLUSTER_LEDGER"], "confine_write": ledger}
    core = {"module": "noeta.plugins.core", "params": params}
    # The example plugin of docs/plugins.md, as a user would load it (examples/ importable).
    notify = {
        "module": "notify_plugin",
        "params": {"outbox": OUTBOX, "ledger": str(scratch / EVENTS)},
    }
    plugins = [core, {"module": "tests.cluster.ledger_plugin"}, notify, canvases.PLUGIN]
    config = {
        "plugins": plugins,
        "workspaces": str(scratch / "workspaces"),
        # The subagents' scripts, named from the repository (ADR-0076).
        "subagent_models": ["scripted:tests/cluster/scripted/*"],
    }
    (scratch / "noeta.yaml").write_text(json.dumps(config))
    # The plain jobs' worker: no plugin with hooks, so its claims start fresh jobs (ADR-0101):
    # the notify plugin's hooks on every other worker kept that path out of the chaos.
    plain = {"plugins": [canvases.PLUGIN], "workspaces": str(scratch / "workspaces")}
    (scratch / canvases.PLAIN_CONFIG).write_text(json.dumps(plain))
    cron = {
        "schedules": [
            {
                "name": "tick",
                "schedule": "* * * * *",
                "task": {"prompt": "go", "model": f"scripted:{SCRIPTS / 'cron_tick.yaml'}"},
                "overlap": "allow",
            }
        ]
    }
    (scratch / "cron.yaml").write_text(json.dumps(cron))


async def run(
    server: ClusterServer,
    scratch: Path,
    seed: int,
    count: int,
    seconds: float,
    mutant: str,
    bouncer: PgBouncer | None = None,
) -> int:
    url = server.new_schema()
    store = await open_store(url, migrate=True, application_name="noeta-cluster")
    if mutant:
        await asyncio.to_thread(apply_mutant, url, mutant)
    cluster = Cluster(url, scratch, server, store)
    if bouncer is not None:
        cluster.pooled_url = await asyncio.to_thread(bouncer.pooled, url)
    rng = random.Random(seed)
    kinds = plan_tasks(rng, count, (*KINDS, *canvases.KINDS, canvases.PLAIN))
    workload = Workload(store, rng, kinds, scratch / "workspaces", config=scratch / "noeta.yaml")
    write_configs(scratch)
    await workload.create_outbox()
    problems: list[str] = []
    chaos = Chaos(cluster, workload, rng)
    if not server.can_restart:
        print("NOETA_TEST_POSTGRES_DSN: a server this run cannot restart; no restart faults")
    try:
        cluster.open_proxies()
        # A mutant run stops at the first check that fails for good (early_stop.py); any run
        # does with NOETA_CLUSTER_STOP_EARLY=1. Such a run starts the pool after the targeted
        # scenarios, where most stop: its five starts do not slow theirs.
        stop_early = mutant or os.environ.get("NOETA_CLUSTER_STOP_EARLY") == "1"
        early = EarlyChecks(store) if stop_early else None
        if early is None:
            _start_pool(cluster)
        try:  # on its own queue: the pool idles
            await _watched(early, run_targeted(cluster, workload))
        except (TimeoutError, ScenarioFailed) as error:
            problems.append(str(error))
            if isinstance(error, ScenarioFailed) and early is not None:
                early.problems.append(str(error))  # what must never happen did: final
        if early is not None:
            if await early.found_something():
                return await _stopped_early(cluster, chaos, workload, seed, early, problems)
            _start_pool(cluster)
        started = time.monotonic()
        await _watched(early, _chaos(cluster, chaos, seconds, bouncer))
        cluster.note("chaos ends; heal phase, no faults")
        if early is not None and await early.found_something():
            return await _stopped_early(cluster, chaos, workload, seed, early, problems)
        unfinished: list[str] = []
        await _watched(early, steadily(lambda: _finish(workload, unfinished)))
        if early is not None and await early.found_something():
            return await _stopped_early(cluster, chaos, workload, seed, early, problems)
        took = time.monotonic() - started
        cluster.stop_everything()
        problems += [
            f"{task}: not finished {FINISH_WITHIN:g} s after the faults" for task in unfinished
        ]
        problems += await check(store, workload, scratch)
        summary = f"{seconds:g} s of chaos, then {'all' if not unfinished else 'not all'} "
        summary += f"done {took - seconds:.0f} s after it"
        return await verdict(cluster, chaos, workload, seed, summary, problems)
    finally:
        cluster.stop_everything()
        cluster.close_proxies()
        await store.close()


async def _chaos(cluster: Cluster, chaos: Chaos, seconds: float, bouncer: PgBouncer | None) -> None:
    restarting = None
    if bouncer is not None:  # once, halfway through the chaos
        restarting = asyncio.create_task(_restart_midway(cluster, bouncer, seconds / 2))
    try:
        await chaos.run(seconds)
    finally:
        if restarting is not None:  # a stopped run's too: no restart left half done
            await restarting


def _start_pool(cluster: Cluster) -> None:
    """The workers of the default queue and the plain jobs' one, which the chaos hits,
    and the scheduler."""
    for name in WORKERS:
        cluster.start_worker(name)
    plain = canvases.PLAIN
    cluster.start_worker(f"w-{plain}", queues=plain, config=canvases.PLAIN_CONFIG)
    cluster.start_scheduler()


async def _watched(early: EarlyChecks | None, phase: Coroutine[Any, Any, object]) -> None:
    """Run a phase: to its end, or in a mutant run until a finished task fails a check."""
    if early is None:
        await phase
    else:
        await early.run_until_found(phase)


async def _stopped_early(
    cluster: Cluster,
    chaos: Chaos,
    workload: Workload,
    seed: int,
    early: EarlyChecks,
    problems: list[str],
) -> int:
    """A mutant run's end at its first final problem: only what the finished tasks show
    (and a targeted scenario's refusal that did not come); unfinished tasks are not
    checked, as they could not finish yet."""
    cluster.note(f"stopped early: {len(early.problems)} problem(s) found")
    await asyncio.to_thread(cluster.server.settled)  # a cancelled restart's thread ran on
    cluster.stop_everything()
    stalls = [problem for problem in problems if problem not in early.problems]
    summary = f"stopped early, {len(early.checked)} finished task(s) checked"
    return await verdict(cluster, chaos, workload, seed, summary, [*early.problems, *stalls])


async def verdict(
    cluster: Cluster,
    chaos: Chaos,
    workload: Workload,
    seed: int,
    summary: str,
    problems: list[str],
    required: tuple[str, ...] = counters.REQUIRED,
) -> int:
    """Count what the chaos did, hold it to the minimum, print the report: 0 if all held."""
    store = cluster.store
    records = await store.list_tasks(limit=10_000)
    logs = {record.id: await store.read_log(record.id) for record in records}
    output = cluster.worker_output()
    chaos.landed["claim-commit-unknown"] = output.count(CLAIM_REPLY_LOST)
    seen = counters.count(logs, output)
    kept = {record.id: await store.late_results(record.id) for record in records}
    fates = counters.late_result_fates(logs, kept, output)
    infrastructure = counters.infrastructure_failures(logs)
    twice = counters.requests_sent_twice_by_one_process(logs, kept, cluster.starts)
    problems += [f"failed for infrastructure: {each}" for each in infrastructure]
    seen.update(counted(await store.read_inbox(OUTBOX, untaken_only=False), cluster.scratch))
    if not any(r.status.finished for r in records) or not sum(chaos.landed.values()):
        problems.append("the run did nothing: no task finished or no fault landed")
    short = counters.short_of_minimum(seen, chaos.landed, chaos.kinds, required)
    fires = await store.cron_history("tick", 1000)
    if problems or short:
        print(f"FAILED: NOETA_CLUSTER_SEED={seed}; the fault timeline:")
        for at, what in cluster.timeline:
            print(f"  {at:7.1f} s  {what}")
    kinds = dict(Counter(workload.kinds.values()))
    print(f"seed {seed}: {len(logs)} tasks ({kinds}, {len(fires)} cron fires); {summary}")
    print("faults landed: " + ", ".join(f"{n} {k}" for k, n in sorted(chaos.landed.items())))
    print("counted: " + ", ".join(f"{n} {what}" for what, n in seen.items()))
    print(f"takeover time: {counters.percentiles(counters.takeover_seconds(logs, output))}")
    print(f"late tool results: {counters.late_result_ratio(fates)}")
    print(f"tasks or turns failed for infrastructure: {len(infrastructure)}")
    print(f"model requests sent twice by one worker process: {len(twice)}")
    lines = takeovers.claims(cluster.worker_logs())
    faults = [(cluster.started_wall + at, what) for at, what in cluster.timeline]
    alone = takeovers.unexplained(lines, faults)
    share = f"{100 * len(alone) / len(lines):.1f} %" if lines else "-"
    print(f"takeovers no fault explains: {len(alone)} of {len(lines)} claims ({share})")
    for each in alone[:10]:
        print(f"  unexplained: {each}")
    for each in twice[:10]:
        print(f"  sent twice: {each}")
    for each in short:
        print(f"MINIMUM CHAOS NOT MET: {each}")
    if problems:
        print(f"FAILED: {len(problems)} problem(s)")
        for problem in problems[:50]:
            print(f"  {problem}")
        return 1
    if short:
        return 1
    print("OK: every check held, the minimum chaos was met")
    return 0


async def _restart_midway(cluster: Cluster, bouncer: PgBouncer, after: float) -> None:
    await asyncio.sleep(after)  # a point in the chaos, not a synchronisation
    cluster.note("PgBouncer restarted (every pooled connection cut)")
    await asyncio.to_thread(bouncer.restart)


async def _finish(workload: Workload, unfinished: list[str]) -> None:
    unfinished[:] = await workload.finish(FINISH_WITHIN)


def main() -> None:
    # The driver's own pool reports connections the faults broke: expected here.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    try:
        seed, count, seconds, mutant = settings(dict(os.environ))
        pooled = pgbouncer_option(sys.argv[1:])
    except BadSetting as error:
        sys.exit(f"make cluster: {error}")
    print(
        f"NOETA_CLUSTER_SEED={seed} NOETA_CLUSTER_TASKS={count} NOETA_CLUSTER_SECONDS={seconds:g}"
        + (f" NOETA_CLUSTER_MUTANT={mutant}" if mutant else "")
        + (" --pgbouncer" if pooled else ""),
        flush=True,
    )

    async def start(server: ClusterServer, scratch: Path) -> int:
        if not pooled:
            return await run(server, scratch, seed, count, seconds, mutant)
        bouncer = start_pgbouncer(server)
        try:
            return await run(server, scratch, seed, count, seconds, mutant, bouncer)
        finally:
            bouncer.remove()

    on_a_server("make cluster", start)


def pgbouncer_option(arguments: list[str]) -> bool:
    """Whether `--pgbouncer` was given; BadSetting for anything else."""
    unknown = [argument for argument in arguments if argument != "--pgbouncer"]
    if unknown:
        raise BadSetting(f"unknown argument {unknown[0]!r} (known: --pgbouncer)")
    return bool(arguments)


def start_pgbouncer(server: ClusterServer) -> PgBouncer:
    """A PgBouncer in transaction mode in front of the run's server; exits if none."""
    binary = pgbouncer_binary()
    if binary is None:
        sys.exit("make cluster: --pgbouncer: no pgbouncer on this machine (`make pgbouncer`)")
    # Four workers of four runs share eight server sessions: pooled, never starved.
    bouncer = PgBouncer(
        binary, server.postgres.admin_dsn, make_home("noeta-cluster-pgbouncer-"), pool_size=8
    )
    bouncer.start()
    return bouncer


def on_a_server(
    target: str, start: Callable[[ClusterServer, Path], Coroutine[Any, Any, int]]
) -> NoReturn:
    """Run `start` on a fresh server in a scratch folder, kept only if the run failed; exit
    with its code."""
    try:
        server = ClusterServer()
    except ServerUnanswered as error:
        sys.exit(f"{target}: {error}")
    scratch = Path(tempfile.mkdtemp(prefix=f"noeta-{target.removeprefix('make ')}-"))
    try:
        code = asyncio.run(start(server, scratch))
    finally:
        server.stop()
    if code == 0:
        shutil.rmtree(scratch, ignore_errors=True)
    else:
        print(f"worker and scheduler logs kept in {scratch}")
    sys.exit(code)


if __name__ == "__main__":
    main()
