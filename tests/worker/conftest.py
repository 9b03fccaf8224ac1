"""Real `noeta worker` processes for the fault tests, and waiting on the store's state."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest

from noeta.backends.stores import open_store
from noeta.backends.stores.embedded import EmbeddedPostgres, make_home
from noeta.config import Config
from noeta.core.ports.store import NewEvent, NewTask, Store
from noeta.core.rules import events
from noeta.core.rules.task_id import workspace_folder
from noeta.plugins.toolbox import Toolbox
from noeta.testing.postgres import TEST_SETTINGS


class NoetaProcess:
    """A `noeta` command running as a real process, its output in `<folder>/<name>.log`."""

    def __init__(
        self,
        arguments: list[str],
        name: str,
        folder: Path,
        *,
        failpoints: str = "",
        env: Mapping[str, str] | None = None,
        prefix: Sequence[str] = (),
    ) -> None:
        """`prefix`: a command that runs this one (`ip netns exec NAME`), by exec."""
        self.name = name
        self.output = folder / f"{name}.log"
        env = {
            **os.environ,
            **(env or {}),
            "NOETA_FAILPOINTS": failpoints,
            "NOETA_HOME": str(folder / "home"),
        }
        self.process = subprocess.Popen(
            [*prefix, sys.executable, "-m", "noeta", *arguments],
            stdout=self.output.open("w"),
            stderr=subprocess.STDOUT,
            env=env,
        )

    def signal(self, number: int) -> None:
        self.process.send_signal(number)

    async def exit_code(self, within: float = 30) -> int:
        return await asyncio.to_thread(self.process.wait, within)

    def log(self) -> str:
        return self.output.read_text()

    async def paused(self) -> bool:
        """Stopped by a signal (a `pause` failpoint it hit, or SIGSTOP): Linux's process
        state, read from /proc, so a test waits for the point, never for a time."""
        stat = await asyncio.to_thread(Path(f"/proc/{self.process.pid}/stat").read_text)
        return stat.rpartition(")")[2].split()[0] == "T"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait(10)


class WorkerProcess(NoetaProcess):
    def __init__(
        self,
        url: str,
        name: str,
        folder: Path,
        *,
        lease: float = 1.0,
        failpoints: str = "",
        concurrency: int = 4,
        poll: float = 1.0,
        queues: str = "default",
        env: Mapping[str, str] | None = None,
        config: Path | None = None,
        grace: float | None = None,
        unrunnable_after: float | None = None,
        extra: Sequence[str] = (),
        prefix: Sequence[str] = (),
    ) -> None:
        # The URL (with its password) in the environment: a worker refuses it in argv.
        env = {**(env or {}), "NOETA_STORE": url}
        arguments = ["worker", "--lease", str(lease), "--name", name]
        arguments += ["--concurrency", str(concurrency), "--poll", str(poll)]
        arguments += ["--queues", queues, *(["--config", str(config)] if config else [])]
        arguments += ["--grace", str(grace)] if grace is not None else []
        if unrunnable_after is not None:
            arguments += ["--unrunnable-after", str(unrunnable_after)]
        arguments += extra
        super().__init__(arguments, name, folder, failpoints=failpoints, env=env, prefix=prefix)


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[Store]:
    """A migrated PostgreSQL store (a module that needs another kind defines its own)."""
    store = await open_store(postgres_url, migrate=True)
    yield store
    await store.close()


@pytest.fixture
def private_server() -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL of the test's own, which it may stop, crash and start again."""
    server = EmbeddedPostgres(make_home("noeta-private-"), settings=TEST_SETTINGS)
    server.start()
    yield server
    server.stop(mode="immediate")


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(url: str, name: str, **options: Any) -> WorkerProcess:
        worker = WorkerProcess(url, name, tmp_path, **options)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


# What a store logs when a statement's deadline passed and it replaced its connections
# (ADR-0152).
REPLACED = "replacing this process's idle and listening connections"

# What "the lease ran out" leaves in the store: the claim's lease ends now, so the next
# claimer may take the task and the holder's next fenced write is refused. (The owner,
# epoch and status stay: a lapsed claim is not released, only no longer live.)
# now(), once: two clock_timestamp() calls differ, and the table holds claimable_at equal
# to lease_until for every claimed row (it failed CI once on a microsecond).
_LAPSE_THE_LEASE = """
UPDATE tasks SET lease_until = now(), claimable_at = now()
 WHERE id = %s AND status IN ('running', 'holding')
RETURNING owner_epoch
"""


@pytest.fixture
async def toolbox(tmp_path: Path) -> AsyncIterator[Toolbox]:
    """The worker's tools, their workspaces under the test's own folder."""
    box = await Toolbox.open(Config(workspaces=str(tmp_path / "workspaces")))
    yield box
    await box.close()


async def lapse_the_lease(url: str, task_id: str) -> int:
    """Make the lease of `task_id`'s claim lapse now, by a statement on the store (an
    operator's, not a worker's): a test orders "the lease lapsed" after the process states
    it needs (a frozen holder, a claim given up) instead of racing a short lease against
    its steps on a loaded machine. Returns the epoch whose lease lapsed."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
        row = await (await admin.execute(_LAPSE_THE_LEASE, (task_id,))).fetchone()
    assert row is not None, f"task {task_id} has no claim whose lease could lapse"
    return int(row[0])


async def until(check: Callable[[], Awaitable[bool]], what: str, within: float = 30) -> None:
    """Poll a condition on the store (not a sleep standing in for synchronisation)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not await check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def an_append_waiting_on_its_row(
    postgres_url: str, worker: NoetaProcess, task_id: str = "t"
) -> AsyncIterator[tuple[psycopg.Connection[Any], psycopg.Connection[Any], int]]:
    """A worker paused before an append (`append.before_commit=pause@N`) let go while the
    test holds its task's row: entered once that append waits on the row lock. Yields the
    holding connection (its rollback lets the append on), an autocommit one, and the
    waiting backend's pid."""
    waiting = (
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
        " AND wait_event_type = 'Lock' AND query LIKE '%%noeta_append%%'"
    )
    with (
        psycopg.connect(postgres_url) as blocker,
        psycopg.connect(postgres_url, autocommit=True) as admin,
    ):
        blocker.execute("SELECT 1 FROM tasks WHERE id = %s FOR UPDATE", (task_id,))
        worker.signal(signal.SIGCONT)
        application = f"noeta-worker:{worker.name}"
        pid: list[int] = []

        async def append_waits() -> bool:
            row = admin.execute(waiting, (application,)).fetchone()
            pid[:] = [row[0]] if row else []
            return bool(pid)

        await until(append_waits, "the worker's append waits on the row lock")
        yield blocker, admin, pid[0]


def workspace_of(folder: Path, task_id: str) -> Path:
    """The workspace a `WorkerProcess` in `folder` gives task `task_id` (the default root,
    beside its NOETA_HOME): the one place that task's Bash commands may write."""
    return folder / "home-workspaces" / workspace_folder(task_id)


async def add_task(store: Store, folder: Path, task_id: str, *replies: dict[str, Any]) -> None:
    script = folder / f"{task_id}.yaml"
    script.write_text(json.dumps({"replies": list(replies)}))
    created = events.TaskCreated(model=f"scripted:{script}", prompt="go", tools=("Bash",))
    await store.create_task(NewTask(task_id, [NewEvent(*events.encode(created))]))


async def status_of(store: Store, task_id: str) -> str:
    task = await store.get_task(task_id)
    return task.status.value if task else "missing"


async def log_types(store: Store, task_id: str) -> list[str]:
    return [e.type for e in await store.read_log(task_id)]
