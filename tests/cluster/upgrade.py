"""`make cluster-upgrade`: a rolling upgrade under the cluster's faults (issue 30 item 3).

    NOETA_CLUSTER_SEED=7 make cluster-upgrade ARGS="--previous 06737cf"

The previous release (previous_release.py) migrates a fresh schema and runs two workers;
its store writes the first tasks, and they are seen written to by its workers. The
current code migrates the schema under them (a process already started is not checked
again). Tasks in a format the previous release cannot read (its own decode says which)
are then created while only its workers run, each to be left untouched, if that release
ships ADR-0097; an earlier one writes its hook's record into them, so they are created
after the roll, as ops/README.md's procedure says. Two current workers and the scheduler
join; the chaos runs in three windows. After the first, every current worker is stopped
while it runs a task until a previous one writes to it; after the first and the second,
one previous worker is killed mid-work and rolled: its release must refuse the migrated
schema in one line, and a current worker takes its place. Faults that restart a worker
choose only current ones. Then the heal, every check of `make cluster` (the replay of
every log with this code among them), and the upgrade's own: tasks handed both ways, and
no previous worker writing after an event it cannot read. The seed is printed first.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import cast

from noeta.backends.stores import open_store
from noeta.core.ports.store import Store, StoredEvent, TaskStatus
from noeta.core.rules import events
from tests.cluster import fanout, previous_release
from tests.cluster.checks import check
from tests.cluster.faults import Chaos
from tests.cluster.processes import REPOSITORY, Cluster
from tests.cluster.run import (
    FINISH_WITHIN,
    BadSetting,
    on_a_server,
    settings,
    verdict,
    write_configs,
)
from tests.cluster.server import ClusterServer
from tests.cluster.workload import SCRIPTS, TOOLS, Workload, plan_tasks, steadily

PREVIOUS = ("p0", "p1")  # the previous release's workers; each rolled to ROLLED_TO's name
ROLLED_TO = {"p0": "w0", "p1": "w1"}
CURRENT = ("w2", "w3")
FIRST_WAVE = 4  # tasks the previous release creates and starts before the migration
NEWER_KINDS = ("tools", "timer", "job")  # kinds whose scripts use only a worker's tools
NEWER_TASKS = 3
LEFT = "its log has a TaskCreated event from a newer noeta; leaving it"
AFTER_THE_ROLL = (
    "it writes its on_event hook's record to a log it cannot read, so the tasks in a format "
    "only this code reads are created once every worker is rolled (ops/README.md)"
)
# The minimum this run holds itself to: every fault kind lands (the choice of kinds is
# make cluster's), tasks change hands between the releases both ways (a problem if not,
# below), and takeovers. The recovery paths that need a fault at one exact step (a model
# request re-sent, a subtask launched across a takeover, a call settled by recover) are
# make cluster's minimum, whose targeted scenarios force them; here they come by chance
# (two of four workers are never restarted): two of four 90 s runs missed one of them.
REQUIRED = ("takeovers",)
REFUSAL = "newer than this noeta"  # the previous release's one line on a newer schema


def previous_run(
    tree: Path, url: str, args: list[str], within: float
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **previous_release.environment(tree), "NOETA_STORE": url}
    env["NOETA_HOME"] = str(tree.parent / "home")
    return subprocess.run(
        [sys.executable, *args], env=env, cwd=REPOSITORY, capture_output=True, text=True,
        timeout=within, check=False,
    )  # fmt: skip


async def start_previous_fleet(
    cluster: Cluster, tree: Path, workload: Workload, wave: list[str]
) -> list[str]:
    """The previous release migrates, runs its workers, creates `wave` and sees each
    written to by them. Problems, if any."""
    migrated = await asyncio.to_thread(
        previous_run, tree, cluster.url, ["-m", "noeta", "db", "migrate"], 120
    )
    if migrated.returncode != 0:
        return [f"the previous release's migrate failed: {migrated.stderr.strip()[-500:]}"]
    for name in PREVIOUS:
        cluster.previous[name] = tree
        cluster.start_worker(name)
    for task in wave:
        if task in workload.in_git:
            await asyncio.to_thread(fanout.make_git_workspace, workload.workspaces / task)
    outbox = events.TaskCreated(model="scripted:none", prompt="", interactive=True)
    tasks = [[fanout.OUTBOX, fanout.OUTBOX_QUEUE, [events.encode(outbox)]]]
    for task in wave:
        model = f"scripted:{SCRIPTS / f'{workload.kinds[task]}.yaml'}"
        created = events.TaskCreated(model=model, prompt="go", tools=TOOLS)
        tasks.append([task, "default", [events.encode(created)]])
    plan = {"tasks": tasks, "written": wave, "within": 300}
    side = str(Path(__file__).with_name("previous_side.py"))
    made = await asyncio.to_thread(
        previous_run, tree, cluster.url, [side, cluster.url, json.dumps(plan)], 330
    )
    if made.returncode != 0:
        return [f"the previous release's first tasks: {made.stderr.strip()[-500:]}"]
    workload.created += wave
    cluster.note(f"the previous release runs {', '.join(wave)}; the current code migrates")
    return []


async def left_for_current(cluster: Cluster, workload: Workload) -> list[str]:
    """Before any current worker starts, the current code creates the tasks the previous
    release cannot read; each must be claimed and left by a previous worker (its log line)."""
    for task in sorted(workload.worker_tools):
        await workload.create(task)
    deadline = time.monotonic() + 120
    waiting = set(workload.worker_tools)
    while waiting and time.monotonic() < deadline:
        output = "".join(cluster.scratch.joinpath(f"{name}.log").read_text() for name in PREVIOUS)
        waiting = {task for task in waiting if f"task {task}: {LEFT}" not in output}
        await asyncio.sleep(0.2)  # a poll of the workers' logs for the line it waits for
    cluster.note(f"the previous release left {', '.join(sorted(workload.worker_tools))}")
    return [f"{task}: no previous worker left it within 120 s" for task in sorted(waiting)]


async def hand_to_previous(cluster: Cluster) -> None:
    """The hand-off from a current worker to a previous one, made sure of: once a current
    worker runs a task, every current worker is stopped until a previous one writes to it
    (or 60 s pass: the check of hand-offs then fails the run)."""
    store, deadline = cluster.store, time.monotonic() + 60
    running: list[str] = []
    while not running and time.monotonic() < deadline:
        records = await store.list_tasks(limit=10_000)
        running = [r.id for r in records if r.status is TaskStatus.RUNNING and r.owner in CURRENT]
        await asyncio.sleep(0.2)  # a poll of the task rows for a running one
    if not running:
        return
    cluster.note(f"SIGSTOP {', '.join(CURRENT)} while they run {running[0]}")
    for name in CURRENT:
        cluster.workers[name].send_signal(signal.SIGSTOP)
    try:
        while time.monotonic() < deadline:
            log = await store.read_log(running[0])
            if any(event.owner in PREVIOUS for event in log if event.owner):
                break
            await asyncio.sleep(0.2)  # a poll of the task's log for a previous writer
    finally:
        for name in CURRENT:
            cluster.workers[name].send_signal(signal.SIGCONT)
        cluster.note(f"SIGCONT {', '.join(CURRENT)}")


async def roll(cluster: Cluster, name: str, tree: Path) -> list[str]:
    """Kill a previous worker mid-work; its release must refuse the migrated schema in one
    line; a current worker takes its place."""
    cluster.note(
        f"roll {name}: SIGKILL, the previous release refuses to start, {ROLLED_TO[name]} starts"
    )
    cluster.kill(cluster.workers.pop(name))
    del cluster.previous[name]
    command = ["-m", "noeta", "worker", "--name", name, "--lease", "1"]
    refused = await asyncio.to_thread(previous_run, tree, cluster.url, command, 120)
    cluster.start_worker(ROLLED_TO[name])
    said = refused.stderr.strip().splitlines()[-1:]  # the lines before: its INFO log
    if refused.returncode == 0 or "Traceback" in refused.stderr or REFUSAL not in "".join(said):
        return [f"the previous release on the migrated schema: exit {refused.returncode}, {said}"]
    cluster.note(f"{name}'s release said: {said[0]}")
    return []


def handoffs(
    logs: dict[str, list[StoredEvent]], unknown: dict[str, list[bool]]
) -> tuple[list[str], list[str], list[str]]:
    """Tasks whose writers went from a previous worker to a current one, the reverse, and
    tasks a previous worker wrote to after an event its release cannot read (`unknown`:
    per task, per event, its own decode's answer)."""
    to_current, to_previous, misread = [], [], []
    for task_id, log in logs.items():
        owners = [event.owner for event in log if event.owner]
        kinds = ["previous" if owner in PREVIOUS else "current" for owner in owners]
        pairs = set(itertools.pairwise(kinds))
        if ("previous", "current") in pairs:
            to_current.append(task_id)
        if ("current", "previous") in pairs:
            to_previous.append(task_id)
        first = next((n for n, flag in enumerate(unknown[task_id]) if flag), len(log))
        if any(event.owner in PREVIOUS for event in log[first:]):
            misread.append(task_id)
    return to_current, to_previous, misread


async def unknown_to_previous(
    tree: Path, logs: dict[str, list[StoredEvent]]
) -> dict[str, list[bool]]:
    logged = [(event.type, event.data) for log in logs.values() for event in log]
    flags = iter(await asyncio.to_thread(previous_release.unknown_to, tree, logged))
    return {task_id: [next(flags) for _ in log] for task_id, log in logs.items()}


async def run(
    server: ClusterServer, scratch: Path, seed: int, count: int, seconds: float, commit: str
) -> int:
    tree = await asyncio.to_thread(previous_release.extract, commit, scratch)
    url = server.new_schema()
    # The store opens when the current code migrates; until then only the previous
    # release's processes touch the schema.
    cluster = Cluster(url, scratch, server, cast(Store, None))
    rng = random.Random(seed)
    kinds = plan_tasks(rng, count)
    wave = [task for task in kinds if kinds[task] != "chat"][:FIRST_WAVE]
    workload = Workload(cast(Store, None), rng, kinds, scratch / "workspaces")
    later = [task for task in kinds if kinds[task] in NEWER_KINDS and task not in wave]
    given_tools = events.encode(events.TaskCreated(model="", tools=None))  # version 2
    if (await asyncio.to_thread(previous_release.unknown_to, tree, [given_tools]))[0]:
        workload.worker_tools.update(later[:NEWER_TASKS])
    else:
        print(f"{tree.name} reads a task given its worker's tools: no newer log to leave")
    write_configs(scratch)
    chaos = Chaos(cluster, workload, rng)
    try:
        cluster.open_proxies((*PREVIOUS, *ROLLED_TO.values(), *CURRENT))
        problems = await start_previous_fleet(cluster, tree, workload, wave)
        if problems:
            print(f"FAILED: NOETA_CLUSTER_SEED={seed}: {problems[0]}")
            return 1
        store = await open_store(url, migrate=True, application_name="noeta-cluster")
        cluster.store = workload.store = store
        try:
            if previous_release.leaves_newer_logs_untouched(tree):
                problems += await left_for_current(cluster, workload)
            else:
                print(f"{tree.name} predates ADR-0097: {AFTER_THE_ROLL}", flush=True)
            return await mixed(cluster, chaos, tree, seed, seconds, problems)
        finally:
            await store.close()
    finally:
        cluster.stop_everything()
        cluster.close_proxies()


async def mixed(
    cluster: Cluster, chaos: Chaos, tree: Path, seed: int, seconds: float, problems: list[str]
) -> int:
    """Current workers beside the previous ones under the chaos, each previous one rolled
    after a window; the heal; every check; the verdict."""
    workload, store = chaos.workload, cluster.store
    for name in CURRENT:
        cluster.start_worker(name)
    cluster.start_scheduler()
    started = time.monotonic()
    for window, rolled in ((0.5, "p0"), (0.25, "p1"), (0.25, "")):
        if not rolled and not previous_release.leaves_newer_logs_untouched(tree):
            for task in sorted(workload.worker_tools):  # the roll is done (ops/README.md)
                await workload.create(task)
        await chaos.run(seconds * window)
        if rolled == "p0":
            await steadily(lambda: hand_to_previous(cluster))
        if rolled:
            problems += await roll(cluster, rolled, tree)
    cluster.note("chaos ends; heal phase, no faults")
    unfinished: list[str] = []
    await steadily(lambda: _finish(workload, unfinished))
    took = time.monotonic() - started
    cluster.stop_everything()
    problems += [
        f"{task}: not finished {FINISH_WITHIN:g} s after the faults" for task in unfinished
    ]
    problems += await check(store, workload, scratch=cluster.scratch)
    logs = {r.id: await store.read_log(r.id) for r in await store.list_tasks(limit=10_000)}
    to_current, to_previous, misread = handoffs(logs, await unknown_to_previous(tree, logs))
    problems += [f"{task}: a previous worker wrote after what it cannot read" for task in misread]
    moved = f"{len(to_current)} previous -> current, {len(to_previous)} current -> previous"
    if not to_current or not to_previous:
        problems.append(f"hand-offs: {moved}; both ways must happen")
    print(f"previous release {tree.name}: hand-offs {moved}; {len(misread)} misread")
    summary = f"{seconds:g} s of chaos, done {took - seconds:.0f} s after it"
    return await verdict(cluster, chaos, workload, seed, summary, problems, REQUIRED)


async def _finish(workload: Workload, unfinished: list[str]) -> None:
    unfinished[:] = await workload.finish(FINISH_WITHIN)


def main() -> None:
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    told = os.environ.get("NOETA_PREVIOUS_RELEASE", "")
    if sys.argv[1:2] == ["--previous"] and len(sys.argv) == 3:
        told = sys.argv[2]
    elif sys.argv[1:]:
        sys.exit("make cluster-upgrade: the only argument is --previous COMMIT")
    try:
        seed, count, seconds, _ = settings(dict(os.environ))
        commit = previous_release.resolve(told)
    except (BadSetting, previous_release.NoPreviousRelease) as error:
        sys.exit(f"make cluster-upgrade: {error}")
    settings_line = f"NOETA_CLUSTER_SEED={seed} NOETA_CLUSTER_TASKS={count}"
    print(f"{settings_line} NOETA_CLUSTER_SECONDS={seconds:g} --previous {commit}", flush=True)
    on_a_server(
        "make cluster-upgrade",
        lambda server, scratch: run(server, scratch, seed, count, seconds, commit),
    )


if __name__ == "__main__":
    main()
