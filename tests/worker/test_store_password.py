"""The store's password stays off the command line of the processes that run tasks
(issue 25, item 11): `worker` and `run` refuse it in --store, other commands warn once,
and a worker given it the recommended ways (NOETA_STORE, --store-file, PGPASSWORD) runs
tasks with no trace of it in its /proc/PID/cmdline, which every local process can read."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from noeta.core.ports.store import Store
from tests.worker.conftest import NoetaProcess, add_task, status_of, until

SECRET = "hunter2-on-argv"


def noeta(*arguments: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("NOETA_", "PG"))}
    return subprocess.run(
        [sys.executable, "-m", "noeta", *arguments],
        capture_output=True,
        text=True,
        timeout=60,
        env={**environment, **(env or {})},
        stdin=subprocess.DEVNULL,
        check=False,
    )


@pytest.mark.parametrize(
    "arguments",
    [
        ["worker", "--store", f"postgresql://u:{SECRET}@127.0.0.1:1/db"],
        ["--store", f"postgresql://u:{SECRET}@127.0.0.1:1/db", "worker"],
        ["run", "hi", "--store", f"host=127.0.0.1 port=1 password={SECRET}"],
        ["worker", "--store", f"postgresql://127.0.0.1:1/db?password={SECRET}"],
    ],
)
def test_a_command_that_runs_tasks_refuses_a_password_in_store(arguments: list[str]) -> None:
    result = noeta(*arguments)
    [line] = result.stderr.splitlines()
    assert result.returncode == 1 and line.startswith("noeta: error: --store ")
    assert "NOETA_STORE or --store-file FILE" in line and "PGPASSWORD" in line
    assert SECRET not in result.stderr + result.stdout


def test_another_command_warns_once_and_works(postgres_url: str) -> None:
    assert noeta("db", "migrate", env={"NOETA_STORE": postgres_url}).returncode == 0
    result = noeta("tasks", "--store", postgres_url)
    assert result.returncode == 0, result.stderr
    [warning] = result.stderr.splitlines()
    assert warning.startswith("noeta: warning: --store ") and "NOETA_STORE" in warning
    assert conninfo_to_dict(postgres_url)["password"] not in result.stderr


def without_password(url: str) -> tuple[str, str]:
    parts = conninfo_to_dict(url)
    password = str(parts.pop("password"))
    return make_conninfo("", **parts), password


@pytest.mark.parametrize("way", ["NOETA_STORE", "--store-file", "PGPASSWORD", "PGPASSFILE"])
async def test_a_worker_given_the_password_the_recommended_way_runs_without_it_on_argv(
    store: Store, postgres_url: str, tmp_path: Path, way: str
) -> None:
    bare, password = without_password(postgres_url)
    arguments = ["worker", "--poll", "0.1", "--name", "w"]
    env: dict[str, str] = {}
    if way == "NOETA_STORE":
        env["NOETA_STORE"] = postgres_url
    elif way == "--store-file":
        (tmp_path / "store-url").write_text(postgres_url + "\n")
        arguments += ["--store-file", str(tmp_path / "store-url")]
    elif way == "PGPASSWORD":
        arguments += ["--store", bare]
        env["PGPASSWORD"] = password
    else:
        passfile = tmp_path / "pgpass"
        passfile.write_text(f"*:*:*:*:{password}\n")
        passfile.chmod(0o600)
        arguments += ["--store", bare]
        env["PGPASSFILE"] = str(passfile)
    await add_task(store, tmp_path, "t", {"text": "ok"})
    worker = NoetaProcess(arguments, "w", tmp_path, env=env)
    try:

        async def done() -> bool:
            return await status_of(store, "t") == "done"

        await until(done, "the worker connects and runs the task", within=60)
        cmdline = await asyncio.to_thread(Path(f"/proc/{worker.process.pid}/cmdline").read_bytes)
        assert b"worker" in cmdline and password.encode() not in cmdline
        assert "warning" not in worker.log()
    finally:
        worker.stop()
