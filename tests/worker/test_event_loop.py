"""A real worker runs on uvloop by default and on asyncio's loop when NOETA_EVENT_LOOP
says so, and runs a task's Bash command on either (ADR-0151); a bad value is one line."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from noeta.cli.event_loop import ENV
from noeta.core.ports.store import Store
from noeta.testing.command_line import run_in_process

from .conftest import WorkerProcess, add_task, status_of, until


@pytest.mark.parametrize(
    ("setting", "loop"), [("", "uvloop"), ("uvloop", "uvloop"), ("asyncio", "asyncio")]
)
async def test_a_worker_runs_a_command_on_the_loop_its_setting_names(
    store: Store,
    postgres_url: str,
    tmp_path: Path,
    workers: Callable[..., WorkerProcess],
    setting: str,
    loop: str,
) -> None:
    call = {"id": "c1", "name": "Bash", "input": {"command": "echo from-$((6 * 7))"}}
    await add_task(store, tmp_path, "t", {"tool_calls": [call]}, {"text": "Done."})
    worker = workers(postgres_url, "w", env={ENV: setting})  # "": the default

    async def done() -> bool:
        return await status_of(store, "t") == "done"

    await until(done, "the task, its command run, finishes")
    # The log line names the loop that runs, read from the running loop, not the setting.
    assert f", loop {loop}, " in worker.log(), worker.log()
    [result] = [e.data for e in await store.read_log("t") if e.type == "ToolFinished"]
    assert isinstance(result, dict)
    assert "from-42" in str(result["content"]), result


@pytest.mark.parametrize("value", ["trio", "UV-loop", "tokio"])
def test_an_unknown_loop_is_one_line_and_nothing_starts(tmp_path: Path, value: str) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("NOETA_", "OTEL_"))}
    environment |= {"NOETA_STORE": f"sqlite:///{tmp_path / 'noeta.db'}", ENV: value}
    result = run_in_process(["worker"], environment)
    assert result.returncode == 1, (result.stdout, result.stderr)
    said = f"noeta: error: {ENV} must be one of uvloop, asyncio, not {value.lower()!r}\n"
    assert result.stderr == said
    assert not (tmp_path / "noeta.db").exists()  # refused before the store was opened
