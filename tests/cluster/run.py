"""`make cluster`: several `noeta worker --lease 1` processes and a scheduler on one
PostgreSQL store, under chaos, then the checks of SPEC §9.

    NOETA_CLUSTER_SEED=7 NOETA_CLUSTER_TASKS=40 NOETA_CLUSTER_SECONDS=60 make cluster

The tasks answer from scripts in tests/cluster/scripted: side effects through Bash (each
appends "<task>:<call>" to a ledger file), background jobs, ScheduleWakeup timers,
interactive tasks taking messages sent during the run, and a per-minute cron schedule.
Meanwhile the chaos loop SIGKILLs a random worker and restarts it, kills every worker at
once, SIGSTOPs a worker for 1.5-3 leases, and kills the scheduler. Afterwards every task
must have finished its script within a deadline, and: no marker is in the ledger twice;
each call the log shows as done is there exactly once; each message sent was taken once;
each background job ended once (finished or lost); the log invariants hold
(invariants.py); sampled task rows never show an epoch going backwards or one epoch with
two owners. The same seed replays the same tasks and the same chaos actions (where they
land in each task still depends on timing). Exit 0 if all hold.
Server: NOETA_TEST_POSTGRES_DSN, else an embedded PostgreSQL in a temporary directory.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from noeta.backends.stores import open_store
from noeta.core import events
from noeta.core.store import (
    CANCEL_KEY,
    Delivery,
    NewEvent,
    NewTask,
    Store,
    StoredEvent,
    TaskStatus,
)
from noeta.testing.postgres import TestPostgres
from tests.cluster.invariants import check_log

SCRIPTS = Path(__file__).parent / "scripted"
WORKERS = 4
LEASE = 1.0
KINDS = ("tools", "job", "timer", "chat")
MESSAGES_PER_CHAT = 6
FINISH_WITHIN = 180.0  # after the chaos: every task done by then
TOOLS = ("Bash", "TodoWrite", "ScheduleWakeup")


@dataclass
class Cluster:
    url: str
    scratch: Path
    rng: random.Random
    store: Store
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    scheduler: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    log: list[str] = field(default_factory=list)
    sent: list[tuple[str, str]] = field(default_factory=list)  # (task, dedupe key)
    epochs: dict[tuple[str, int], str] = field(default_factory=dict)  # (task, epoch): owner
    last_epoch: dict[str, int] = field(default_factory=dict)
    sample_problems: list[str] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "NOETA_HOME": str(self.scratch / "home"),
            "NOETA_CLUSTER_LEDGER": str(self.scratch / "ledger"),
            "NOETA_FAILPOINTS": "",
        }

    def start_worker(self, name: str) -> None:
        command = [sys.executable, "-m", "noeta", "worker", "--store", self.url, "--name", name]
        command += ["--lease", str(LEASE), "--poll", "0.5", "--concurrency", "4"]
        output = (self.scratch / f"{name}.log").open("a")
        self.workers[name] = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, env=self.env
        )

    def start_scheduler(self) -> None:
        command = [sys.executable, "-m", "noeta", "scheduler", "--store", self.url]
        command += ["--cron", str(self.scratch / "cron.yaml")]
        output = (self.scratch / "scheduler.log").open("a")
        self.scheduler = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, env=self.env
        )

    def kill(self, process: subprocess.Popen[bytes]) -> None:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.kill()
            process.wait(10)

    def stop_everything(self) -> None:
        for process in [*self.workers.values(), self.scheduler]:
            if process is not None:
                self.kill(process)


def plan_tasks(rng: random.Random, count: int) -> dict[str, str]:
    """Task id -> kind, in the order they will be created."""
    kinds = [rng.choice(KINDS) for _ in range(count)]
    return {f"{kind}-{n:03}": kind for n, kind in enumerate(kinds)}


async def create_task(cluster: Cluster, task_id: str, kind: str) -> None:
    created = events.TaskCreated(
        model=f"scripted:{SCRIPTS / f'{kind}.yaml'}",
        prompt="" if kind == "chat" else "go",
        interactive=kind == "chat",
        tools=TOOLS,
    )
    await cluster.store.create_task(NewTask(task_id, [NewEvent(*events.encode(created))]))


async def send_message(cluster: Cluster, task_id: str) -> None:
    number = sum(1 for sent_to, _ in cluster.sent if sent_to == task_id) + 1
    key = f"message:{task_id}:{number}"
    cluster.sent.append((task_id, key))
    delivery = Delivery(task_id, {"text": f"message {number}"}, key)
    await cluster.store.deliver(delivery)
    if cluster.rng.random() < 0.3:  # a sender that retries: delivered once all the same
        await cluster.store.deliver(delivery)


async def sample_rows(cluster: Cluster) -> None:
    for record in await cluster.store.list_tasks(limit=1000):
        if record.owner is None or record.owner_epoch == 0:
            continue
        before = cluster.last_epoch.get(record.id, 0)
        if record.owner_epoch < before:
            cluster.sample_problems.append(
                f"{record.id}: epoch went back from {before} to {record.owner_epoch}"
            )
        cluster.last_epoch[record.id] = max(before, record.owner_epoch)
        key = (record.id, record.owner_epoch)
        seen = cluster.epochs.setdefault(key, record.owner)
        if seen != record.owner:
            cluster.sample_problems.append(
                f"{record.id}: epoch {record.owner_epoch} owned by {seen} and {record.owner}"
            )


async def chaos(cluster: Cluster, seconds: float, kinds: dict[str, str]) -> None:
    """Tasks are created through the first two thirds of the window, so the chaos meets
    them mid-step, not only idle workers."""
    start = time.monotonic()
    deadline = start + seconds
    waiting = list(kinds)
    chats: list[str] = []
    while time.monotonic() < deadline:
        await asyncio.sleep(cluster.rng.uniform(0.3, 1.5))
        due = len(kinds) * min(1.0, (time.monotonic() - start) / (seconds * 2 / 3))
        while waiting and len(kinds) - len(waiting) < due:
            task_id = waiting.pop(0)
            await create_task(cluster, task_id, kinds[task_id])
            if kinds[task_id] == "chat":
                chats.append(task_id)
        await sample_rows(cluster)
        if chats and cluster.rng.random() < 0.6:
            target = cluster.rng.choice(chats)
            if sum(1 for sent_to, _ in cluster.sent if sent_to == target) < MESSAGES_PER_CHAT:
                await send_message(cluster, target)
        roll = cluster.rng.random()
        name = cluster.rng.choice(sorted(cluster.workers))
        if roll < 0.35:
            cluster.log.append(f"SIGKILL {name}, restart")
            cluster.kill(cluster.workers[name])
            cluster.start_worker(name)
            cluster.restarts += 1
        elif roll < 0.45:
            cluster.log.append("SIGKILL every worker, restart them")
            for each in sorted(cluster.workers):
                cluster.kill(cluster.workers[each])
                cluster.start_worker(each)
            cluster.restarts += len(cluster.workers)
        elif roll < 0.65:
            pause = cluster.rng.uniform(1.5, 3.0) * LEASE
            cluster.log.append(f"SIGSTOP {name} for {pause:.1f} s")
            worker = cluster.workers[name]
            worker.send_signal(signal.SIGSTOP)
            await asyncio.sleep(pause)
            worker.send_signal(signal.SIGCONT)
        elif roll < 0.72 and cluster.scheduler is not None:
            cluster.log.append("SIGKILL the scheduler, restart")
            cluster.kill(cluster.scheduler)
            cluster.start_scheduler()


async def finish(cluster: Cluster, kinds: dict[str, str], within: float) -> list[str]:
    """Send each chat its remaining messages, cancel it once all are taken, and wait until
    every task has finished. Returns the ids still unfinished at the deadline."""
    chats = [task for task, kind in kinds.items() if kind == "chat"]
    for task in chats:
        while sum(1 for sent_to, _ in cluster.sent if sent_to == task) < MESSAGES_PER_CHAT:
            await send_message(cluster, task)
    cancelled: set[str] = set()
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        await sample_rows(cluster)
        for task in chats:
            if task in cancelled:
                continue
            log = await cluster.store.read_log(task)
            taken = sum(1 for event in log if event.type == "MessageTaken")
            answered = sum(1 for event in log if event.type == "TurnEnded")
            if taken >= MESSAGES_PER_CHAT and answered >= MESSAGES_PER_CHAT:
                await cluster.store.deliver(Delivery(task, {"kind": "cancel"}, CANCEL_KEY))
                cancelled.add(task)
        records = await cluster.store.list_tasks(limit=1000)
        left = [record.id for record in records if not record.status.finished]
        if not left and len(cancelled) == len(chats):
            return []
        await asyncio.sleep(0.5)
    records = await cluster.store.list_tasks(limit=1000)
    return [record.id for record in records if not record.status.finished]


async def what_the_chaos_did(store: Store) -> str:
    """How often the chaos really bit: read back from the logs."""
    seen: Counter[str] = Counter()
    for record in await store.list_tasks(limit=1000):
        seen["claimed more than once"] += record.owner_epoch > 1
        log = await store.read_log(record.id)
        calls = [e for e in log if e.type == "ModelCalled"]
        replies = [e for e in log if e.type in ("ModelReplied", "ModelFailed")]
        seen["model requests re-sent"] += len(calls) - len(replies)
        for event in log:
            data = event.data if isinstance(event.data, dict) else {}
            if event.type == "ToolFinished" and data.get("recovery"):
                seen[f"calls settled after a crash ({data['recovery']})"] += 1
            seen["jobs lost"] += event.type == "JobLost"
            seen["wake-ups"] += event.type == "WokenUp"
    return ", ".join(f"{n} {what}" for what, n in seen.items())


async def check(cluster: Cluster, kinds: dict[str, str]) -> list[str]:
    problems = list(cluster.sample_problems)
    ledger = Counter((cluster.scratch / "ledger").read_text().split())
    problems += [f"marker {marker} recorded {n} times" for marker, n in ledger.items() if n > 1]
    records = {record.id: record for record in await cluster.store.list_tasks(limit=1000)}
    for task_id, record in sorted(records.items()):
        expected = TaskStatus.CANCELLED if kinds.get(task_id) == "chat" else TaskStatus.DONE
        if record.status is not expected:
            problems.append(f"{task_id}: ended {record.status.value}, not {expected.value}")
        log = await cluster.store.read_log(task_id)
        inbox = await cluster.store.read_inbox(task_id, untaken_only=False)
        problems += [f"{task_id}: {problem}" for problem in check_log(log, inbox)]
        problems += [f"{task_id}: {problem}" for problem in side_effects(log, ledger, task_id)]
        if kinds.get(task_id) == "chat":
            sent = {key for sent_to, key in cluster.sent if sent_to == task_id}
            keys = {entry.id: entry.dedupe_key for entry in inbox}
            taken = Counter(
                keys.get(int(e.data["inbox_id"]))  # type: ignore[index,arg-type,call-overload]
                for e in log
                if e.type == "MessageTaken"
            )
            for key in sent:
                if taken[key] != 1:
                    problems.append(f"{task_id}: message {key} taken {taken[key]} times")
    return problems


def side_effects(log: list[StoredEvent], ledger: Counter[str], task_id: str) -> list[str]:
    """Each Bash call the log shows as done wrote its marker exactly once; a background
    job's marker is written by the job, so it is checked when the log shows it finished.
    (A call whose outcome is unknown may have written it, at most once: checked above.)"""
    problems = []
    names = {e.data["call_id"]: e.data["name"] for e in log if e.type == "ToolStarted"}  # type: ignore[index,call-overload]
    jobs = {e.data["job_id"] for e in log if e.type == "JobStarted"}  # type: ignore[index,call-overload]
    for event in log:
        data = event.data if isinstance(event.data, dict) else {}
        if event.type == "ToolFinished":
            call = data["call_id"]
            done = not data["is_error"] and data.get("recovery") != "unknown"
            if done and names.get(call) == "Bash" and call not in jobs:
                marker = f"{task_id}:{call}"
                if ledger[marker] != 1:
                    problems.append(f"{marker} is done in the log, {ledger[marker]}x in the ledger")
        elif event.type == "JobFinished" and data.get("exit_code") == 0:
            marker = f"{task_id}:{data['job_id']}"
            if ledger[marker] != 1:
                problems.append(f"job {marker} finished, {ledger[marker]}x in the ledger")
    return problems


async def run(url: str, scratch: Path, seed: int, count: int, seconds: float) -> int:
    store = await open_store(url, migrate=True, application_name="noeta-cluster")
    cluster = Cluster(url, scratch, random.Random(seed), store)
    (scratch / "ledger").touch()
    cron = {
        "schedules": [
            {
                "name": "tick",
                "schedule": "* * * * *",
                "task": {"prompt": "go", "model": f"scripted:{SCRIPTS / 'tools.yaml'}"},
                "overlap": "allow",
            }
        ]
    }
    (scratch / "cron.yaml").write_text(json.dumps(cron))
    try:
        for n in range(WORKERS):
            cluster.start_worker(f"w{n}")
        cluster.start_scheduler()
        kinds = plan_tasks(cluster.rng, count)
        started = time.monotonic()
        await chaos(cluster, seconds, kinds)
        unfinished = await finish(cluster, kinds, FINISH_WITHIN)
        took = time.monotonic() - started
        cluster.stop_everything()
        problems = [f"{task}: not finished within the deadline" for task in unfinished]
        problems += await check(cluster, kinds)
        fires = await store.cron_history("tick", 1000)
        print(
            f"seed {seed}: {count} tasks ({dict(Counter(kinds.values()))}), "
            f"{len(fires)} cron fires, {seconds:g} s of chaos, all finished after {took:.0f} s"
        )
        print(
            f"chaos: {len(cluster.log)} actions, {cluster.restarts} worker restarts; "
            f"{len(cluster.sent)} messages sent; {len(cluster.epochs)} (task, epoch) sampled"
        )
        for action, n in Counter(a.split(" w")[0] for a in cluster.log).most_common():
            print(f"  {n:3} x {action}")
        print(f"in the logs: {await what_the_chaos_did(store)}")
        if problems:
            print(f"FAILED: {len(problems)} problem(s)")
            for problem in problems[:50]:
                print(f"  {problem}")
            return 1
        print("OK: every check held")
        return 0
    finally:
        cluster.stop_everything()
        await store.close()


def main() -> None:
    seed = int(os.environ.get("NOETA_CLUSTER_SEED") or random.randrange(1_000_000))
    count = int(os.environ.get("NOETA_CLUSTER_TASKS") or 24)
    # A minute of chaos crosses at least one minute boundary: one cron fire, or more.
    seconds = float(os.environ.get("NOETA_CLUSTER_SECONDS") or 60)
    print(
        f"NOETA_CLUSTER_SEED={seed} NOETA_CLUSTER_TASKS={count} NOETA_CLUSTER_SECONDS={seconds:g}"
    )
    server = TestPostgres()
    scratch = Path(tempfile.mkdtemp(prefix="noeta-cluster-"))
    try:
        code = asyncio.run(run(server.new_schema(), scratch, seed, count, seconds))
    finally:
        server.stop()
    if code == 0:
        shutil.rmtree(scratch, ignore_errors=True)
    else:
        print(f"worker and scheduler logs kept in {scratch}")
    sys.exit(code)


if __name__ == "__main__":
    main()
