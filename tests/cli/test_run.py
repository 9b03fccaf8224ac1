"""`noeta run` and `noeta show` as a user runs them, and their bad inputs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from noeta.testing.command_line import run_in_process

EXAMPLE = Path(__file__).parents[2] / "examples" / "hello.yaml"


def noeta(
    *arguments: str, store: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`noeta ARGUMENTS` on `store`, run in this process (a new one costs about a second of
    CPU and proves nothing more about parsing, output and exit codes)."""
    return run_in_process(arguments, command_environment(store, env), stdin)


def noeta_process(
    *arguments: str, store: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`noeta ARGUMENTS` as a real process: for what only a process shows (state read once
    at import, such as NOETA_FAILPOINTS; what the interpreter prints)."""
    return subprocess.run(
        [sys.executable, "-m", "noeta", *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        input=stdin,
        env=command_environment(store, env),
        check=False,
    )


def command_environment(store: str, env: dict[str, str] | None) -> dict[str, str]:
    """This process's environment without the providers' keys, with NOETA_STORE and `env`."""
    keys = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL")
    environment = {k: v for k, v in os.environ.items() if k not in keys}
    return {**environment, "NOETA_STORE": store, **(env or {})}


@pytest.fixture
def sqlite_store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'noeta.db'}"


def one_line_error(result: subprocess.CompletedProcess[str], code: int = 1) -> str:
    assert result.returncode == code and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("noeta: error: "), result.stderr
    return lines[0]


def test_run_prints_the_answer_and_show_prints_the_log(sqlite_store: str) -> None:
    result = noeta(
        "run",
        "What does noeta guarantee?",
        "--model",
        f"scripted:{EXAMPLE}",
        "--id",
        "demo",
        store=sqlite_store,
    )
    assert result.returncode == 0, result.stderr
    assert "exactly one writer" in result.stdout
    assert result.stderr.strip() == "task demo: done"
    shown = noeta("show", "demo", store=sqlite_store)
    assert shown.returncode == 0
    lines = shown.stdout.splitlines()
    assert "done" in lines[0]
    # Then what it cost (a scripted model is free), then the log's steps.
    assert lines[1] == "usage (with subtasks): cost $0.000000"
    titles = [line.split(maxsplit=2)[2] for line in lines[3:] if line[:5].strip()]
    assert titles == [
        "created",
        "plugins",
        "model call",
        "model reply",
        "turn ended: answered",
        "finished: done",
    ]
    document = json.loads(noeta("show", "demo", "--json", store=sqlite_store).stdout)
    assert document["task"]["status"] == "done" and len(document["log"]) == 6


def test_a_failed_task_exits_non_zero(sqlite_store: str, tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text("replies:\n  - text: x\n    fail_first: [{status: 401, message: nope}]\n")
    result = noeta("run", "hi", "--model", f"scripted:{script}", "--id", "f", store=sqlite_store)
    assert result.returncode == 1
    assert "task f: failed (llm_error: nope (HTTP 401))" in result.stderr


def test_the_prompt_can_come_from_stdin(sqlite_store: str) -> None:
    result = noeta(
        "run",
        "-",
        "--model",
        f"scripted:{EXAMPLE}",
        store=sqlite_store,
        stdin="a prompt\nover lines",
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("nope:x", "unknown model spec 'nope:x'"),
        ("claude", "unknown model spec 'claude'"),
        ("anthropic:claude-x", "ANTHROPIC_API_KEY is not set"),
        ("openai:gpt-x", "OPENAI_API_KEY is not set"),
        ("scripted:/no/such/file.yaml", "cannot read the model script"),
    ],
)
def test_bad_model_specs_are_one_line_and_write_nothing(
    sqlite_store: str, model: str, expected: str
) -> None:
    line = one_line_error(noeta("run", "hi", "--model", model, "--id", "x", store=sqlite_store))
    assert expected in line
    assert one_line_error(noeta("show", "x", store=sqlite_store)).endswith("no task with id 'x'")


def test_a_malformed_script_names_the_line(sqlite_store: str, tmp_path: Path) -> None:
    script = tmp_path / "bad.yaml"
    script.write_text("replies:\n  - text: ok\n  - text: [unclosed\n")
    line = one_line_error(noeta("run", "hi", "--model", f"scripted:{script}", store=sqlite_store))
    assert f"{script}, line 4" in line
    script.write_text("replies:\n  - text: ok\n  - tool_calls: [{input: {}}]\n")
    line = one_line_error(noeta("run", "hi", "--model", f"scripted:{script}", store=sqlite_store))
    assert f"{script}, line 3: tool call 1 needs a name" in line


def test_a_ten_megabyte_prompt_is_refused_before_anything_is_written(sqlite_store: str) -> None:
    result = noeta(
        "run",
        "-",
        "--model",
        f"scripted:{EXAMPLE}",
        "--id",
        "big",
        store=sqlite_store,
        stdin="x" * (10 * 1024 * 1024),
    )
    assert "the limit is 1000000" in one_line_error(result)
    assert one_line_error(noeta("show", "big", store=sqlite_store))


@pytest.mark.parametrize("lease", ["0", "-1", "inf", "0.5", "3601"])
def test_a_lease_out_of_bounds_is_refused(sqlite_store: str, lease: str) -> None:
    result = noeta(
        "run", "hi", "--model", f"scripted:{EXAMPLE}", "--lease", lease, store=sqlite_store
    )
    assert "a lease must be between 1 and 3600 seconds" in one_line_error(result, code=2)


def test_a_plugin_that_fails_to_load_is_named_at_start_up(
    sqlite_store: str, tmp_path: Path
) -> None:
    config = tmp_path / "noeta.yaml"
    config.write_text("plugins:\n  - module: no_such_plugin_module\n")
    result = noeta(
        "run",
        "hi",
        "--model",
        f"scripted:{EXAMPLE}",
        "--config",
        str(config),
        "--id",
        "p",
        store=sqlite_store,
    )
    line = one_line_error(result)
    assert "plugin module:no_such_plugin_module cannot be loaded: ModuleNotFoundError" in line
    assert one_line_error(noeta("show", "p", store=sqlite_store))  # nothing was written


@pytest.mark.parametrize("prompt", ["", "  \n\t"])
def test_a_blank_prompt_is_refused_before_anything_is_written(
    sqlite_store: str, prompt: str
) -> None:
    result = noeta(
        "run", prompt, "--model", f"scripted:{EXAMPLE}", "--id", "blank", store=sqlite_store
    )
    assert "a prompt must not be empty (or only blanks)" in one_line_error(result)
    assert one_line_error(noeta("show", "blank", store=sqlite_store))


def test_run_keeps_its_task_while_a_worker_is_idle_on_the_same_store(
    postgres_url: str, tmp_path: Path
) -> None:
    # The failpoint holds `noeta run` between creating its task and claiming it, well
    # past the worker's wake-up and poll: the task must still be there for it to claim.
    assert noeta("db", "migrate", store=postgres_url).returncode == 0
    output = tmp_path / "worker.log"
    worker = subprocess.Popen(
        [sys.executable, "-m", "noeta", "worker", "--poll", "0.1"],
        stdout=output.open("w"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "NOETA_HOME": str(tmp_path / "home"), "NOETA_STORE": postgres_url},
    )
    try:
        deadline = time.monotonic() + 60
        while "listening for wake-ups" not in output.read_text():
            assert time.monotonic() < deadline and worker.poll() is None, output.read_text()
            time.sleep(0.05)
        result = noeta_process(
            "run",
            "What does noeta guarantee?",
            "--model",
            f"scripted:{EXAMPLE}",
            "--id",
            "mine",
            store=postgres_url,
            env={"NOETA_FAILPOINTS": "run.after_create=sleep(1500)"},
        )
        assert result.returncode == 0, result.stderr
        assert result.stderr.strip() == "task mine: done"
        assert "task mine" not in output.read_text()  # the worker never touched it
        shown = json.loads(noeta("show", "mine", "--json", store=postgres_url).stdout)
        assert shown["task"]["owner"].startswith("run-") and shown["task"]["owner_epoch"] == 1
    finally:
        worker.kill()
        worker.wait(10)


@pytest.mark.parametrize("task_id", ["..", ".", "a/../b", "/etc", "x" * 10_000, ""])
def test_an_id_that_could_name_a_folder_outside_the_workspaces_is_refused(
    sqlite_store: str, tmp_path: Path, task_id: str
) -> None:
    """The reported hole: `--id ..` made the task's workspace $NOETA_HOME, where the
    embedded server's password file lives, and Read returned the password."""
    home = tmp_path / "home"
    (home / "workspaces").mkdir(parents=True)
    (home / "password").write_text("the-superuser-password\n")
    script = tmp_path / "read.yaml"
    script.write_text(
        "replies:\n"
        "  - tool_calls: [{id: c1, name: Read, input: {file_path: password}}]\n"
        "  - text: done\n"
    )
    result = noeta(
        "run", "hi", "--model", f"scripted:{script}", "--id", task_id,
        store=sqlite_store, env={"NOETA_HOME": str(home)},
    )  # fmt: skip
    assert "a task id is 1-128 characters of" in one_line_error(result)
    assert "the-superuser-password" not in result.stdout + result.stderr
    listed = noeta("tasks", "--json", store=sqlite_store)
    assert listed.returncode == 0 and json.loads(listed.stdout or "[]") == []


def test_the_default_workspaces_are_not_under_the_embedded_servers_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from noeta.backends.stores.embedded_home import default_home
    from noeta.config import default_workspaces

    for home in (tmp_path / "home", None):
        if home is None:
            monkeypatch.delenv("NOETA_HOME", raising=False)
        else:
            monkeypatch.setenv("NOETA_HOME", str(home))
        workspaces = Path(default_workspaces())
        assert not workspaces.is_relative_to(default_home())
        assert workspaces.parent == default_home().parent


SLOW_SCRIPT = """
replies:
  - text: "Let me wait."
    tool_calls:
      - {id: call-1, name: Bash, input: {command: "sleep 60"}}
  - text: "done waiting"
"""


def test_ctrl_c_in_run_says_where_the_task_is_and_exits_130(
    sqlite_store: str, tmp_path: Path
) -> None:
    script = tmp_path / "slow.yaml"
    script.write_text(SLOW_SCRIPT)
    command = [sys.executable, "-m", "noeta", "run", "hi", "--model", f"scripted:{script}"]
    process = subprocess.Popen(
        [*command, "--id", "slow", "--store", sqlite_store],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while "tool Bash" not in noeta("show", "slow", store=sqlite_store).stdout:
            assert process.poll() is None and time.monotonic() < deadline, "no tool started"
        process.send_signal(signal.SIGINT)  # what Ctrl-C sends
        out, errors = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130 and out == "", errors
    assert errors.splitlines() == [
        "noeta: interrupted: task slow is left in the queue noeta-run, where "
        "`noeta worker --queues noeta-run` finishes it (or `noeta cancel slow`)"
    ]
    listed = json.loads(noeta("tasks", "--json", store=sqlite_store).stdout)
    assert [(t["id"], t["status"]) for t in listed] == [("slow", "ready")]  # handed back


def test_run_prices_as_the_worker_does_for_a_fleet_budget(
    sqlite_store: str, tmp_path: Path
) -> None:
    """noeta.yaml's `prices:` are `noeta run`'s too: at this price the first call's
    estimate passes the run queue's budget, so it is not sent and the run fails naming
    the budget (at the bundled price, a scripted model is free and would run)."""
    model = f"scripted:{EXAMPLE}"
    config = tmp_path / "noeta.yaml"
    dear = "{input: 100000000, output: 0, cache_read: 0, cache_write: 0}"
    config.write_text(f'prices:\n  "{model}": {dear}\n')
    budget = noeta("budget", "set", "noeta-run", "--per-day", "1.00", store=sqlite_store)
    assert budget.returncode == 0, budget.stderr
    result = noeta(
        "run", "hi", "--model", model, "--id", "dear", "--config", str(config), store=sqlite_store
    )
    assert (result.returncode, result.stderr) == (1, "task dear: failed\n")
    shown = noeta("show", "dear", store=sqlite_store).stdout
    assert "budget exceeded: call not sent" in shown
    assert "budget_exceeded: fleet budget noeta-run --per-day 1.00: $0.000000 spent" in shown
