"""A worker of the previous release (ops/previous-release, or NOETA_PREVIOUS_RELEASE), on
its own schema, given one task per event type, version or field this code added since
(ADR-0097): it leaves a log it cannot read and writes nothing to it; a field it does not
know (provenance only) it ignores, running the task as this code would, the field kept.

The logs are encoded by this code and written by the previous release's store
(previous_side.py); the worker is a real `noeta worker` process of that release.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from noeta.client.job_tasks import JOB_CALL_ID
from noeta.core.ports.model import Text, Usage
from noeta.core.rules import events
from noeta.testing import postgres
from tests.cluster import previous_release

REPOSITORY = Path(__file__).parents[2]
ANSWER = "the answer"


def _tasks(script: Path) -> dict[str, list[events.Event]]:
    model = f"scripted:{script}"
    return {
        # ADR-0088: a task given its worker's tools is TaskCreated version 2.
        "worker-tools": [events.TaskCreated(model=model, prompt="go", tools=None)],
        # ADR-0094: a job's attempt that failed and waits to be tried again.
        "attempt-failed": [
            events.TaskCreated(model="", tools=("Record",)),
            events.CallRequested(JOB_CALL_ID, "Record", {}),
            events.AttemptFailed(JOB_CALL_ID, 1, "ValueError: no", 0.5),
        ],
        # ADR-0091: a fork records where it came from; nothing else about it is new.
        "forked": [events.TaskCreated(model=model, prompt="go", forked_from="src", forked_at=4)],
        # ADR-0096: a fork whose first worker copies its source's workspace: TaskCreated
        # version 3, so that no worker runs it without the files it was promised.
        "workspace-copy": [events.TaskCreated(model=model, prompt="go", workspace_from="src")],
        # Issue 32: a reply whose usage the provider did not say, or with reasoning
        # tokens: ModelReplied version 2, a usage an older noeta cannot read.
        "unknown-usage": [
            events.TaskCreated(model=model, prompt="go"),
            events.ModelCalled("ab" * 32, "", 10),
            events.ModelReplied((Text("hi"),), "end_turn", None),
        ],
        "reasoning-usage": [
            events.TaskCreated(model=model, prompt="go"),
            events.ModelCalled("ab" * 32, "", 10),
            events.ModelReplied((Text("hi"),), "end_turn", Usage(1, 9, reasoning_tokens=5)),
        ],
        # Issue 32: a call records its request's estimated input tokens (a record only).
        "estimated-call": [
            events.TaskCreated(model=model, prompt="go"),
            events.ModelCalled("ab" * 32, "", 123),
        ],
        # ADR-0094: a job retried by hand names the task it retries.
        "retried-job": [
            events.TaskCreated(model="", tools=("Record",)),
            events.CallRequested(JOB_CALL_ID, "Record", {}, retry_of="failed-job"),
        ],
        # ADR-0104: a canvas of jobs is a new event type: no older worker launches its
        # members (it would run the task as one without a model or a prompt).
        "canvas": [
            events.TaskCreated(model="", tools=()),
            events.CanvasRequested(
                {"jobs": {}, "tree": {"group": [{"job": "Record", "input": {}, "receives": ""}]}}
            ),
        ],
    }


LEFT = {
    "worker-tools": "TaskCreated",
    "attempt-failed": "AttemptFailed",
    "workspace-copy": "TaskCreated",
    "unknown-usage": "ModelReplied",
    "reasoning-usage": "ModelReplied",
    "canvas": "CanvasRequested",
}


@dataclass
class Fleet:
    url: str = field(repr=False)  # it holds the server's password
    output: Path
    ledger: Path
    created: dict[str, list[events.Event]]

    def log(self, task_id: str) -> list[tuple[str, dict[str, Any], str | None]]:
        with psycopg.connect(self.url) as connection:
            rows = connection.execute(
                "SELECT type, data, owner FROM events WHERE task_id = %s ORDER BY seq", [task_id]
            ).fetchall()
        return [(kind, json.loads(data), owner) for kind, data, owner in rows]

    def status(self, task_id: str) -> str:
        with psycopg.connect(self.url) as connection:
            row = connection.execute("SELECT status FROM tasks WHERE id = %s", [task_id]).fetchone()
        assert row is not None
        return str(row[0])


def _until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + 120  # a bound on the wait, not a measure of anything
    while not condition():
        assert time.monotonic() < deadline, f"the previous release's worker never {what}"
        time.sleep(0.2)  # a poll of rows and of the worker's output


@pytest.fixture(scope="module")
def fleet(
    postgres_server: postgres.TestPostgres, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fleet]:
    commit = previous_release.resolve(os.environ.get("NOETA_PREVIOUS_RELEASE", ""))
    scratch = tmp_path_factory.mktemp("previous")
    tree = previous_release.extract(commit, scratch)
    url = postgres_server.new_schema()
    env = {**os.environ, **previous_release.environment(tree), "NOETA_STORE": url}
    env |= {"NOETA_HOME": str(scratch / "home"), "NOETA_CLUSTER_LEDGER": str(scratch / "ledger")}
    (scratch / "ledger").touch()
    run = {"env": env, "cwd": REPOSITORY, "capture_output": True, "text": True, "timeout": 120}
    migrated = subprocess.run([sys.executable, "-m", "noeta", "db", "migrate"], check=False, **run)
    assert migrated.returncode == 0, migrated.stderr
    script = scratch / "answer.yaml"
    script.write_text(json.dumps({"replies": [{"text": ANSWER}]}))
    created = _tasks(script)
    logs = [[task, "default", [events.encode(e) for e in log]] for task, log in created.items()]
    plan = json.dumps({"tasks": logs, "written": [], "within": 60})
    side = [sys.executable, str(Path(__file__).with_name("previous_side.py")), url, plan]
    made = subprocess.run(side, check=False, **run)
    assert made.returncode == 0, made.stderr
    plugins = [{"module": "noeta.plugins.core"}, {"module": "tests.cluster.ledger_plugin"}]
    config = scratch / "noeta.yaml"
    config.write_text(json.dumps({"plugins": plugins, "workspaces": str(scratch / "ws")}))
    command = [sys.executable, "-m", "noeta", "worker", "--name", "previous", "--lease", "1"]
    command += ["--poll", "0.2", "--config", str(config)]
    output = scratch / "worker.log"
    with output.open("w") as sink:
        worker = subprocess.Popen(command, env=env, cwd=REPOSITORY, stdout=sink, stderr=sink)
    try:
        yield Fleet(url, output, scratch / "ledger", created)
    finally:
        worker.kill()
        worker.wait(10)


@pytest.mark.parametrize("task_id", sorted(LEFT))
def test_the_previous_release_leaves_a_log_it_cannot_read_and_writes_nothing(
    fleet: Fleet, task_id: str
) -> None:
    said = f"task {task_id}: its log has a {LEFT[task_id]} event from a newer noeta; leaving it"
    _until(lambda: said in fleet.output.read_text(), f"left {task_id}")
    kinds = [kind for kind, _, _ in fleet.log(task_id)]
    assert kinds == [type(event).__name__ for event in fleet.created[task_id]]
    assert fleet.status(task_id) not in ("done", "failed", "cancelled")
    assert task_id not in fleet.ledger.read_text()  # its call never ran


@pytest.mark.parametrize(
    ("task_id", "new_field"),
    [("forked", "forked_from"), ("retried-job", ""), ("estimated-call", "input_estimate")],
)
def test_the_previous_release_runs_a_task_whose_new_field_it_does_not_know(
    fleet: Fleet, task_id: str, new_field: str
) -> None:
    _until(lambda: fleet.status(task_id) == "done", f"finished {task_id}")
    log = fleet.log(task_id)
    first, written = log[0], log[len(fleet.created[task_id]) :]
    assert all(owner == "previous" for _, _, owner in written)
    if new_field == "input_estimate":  # its open call sent again, the estimate kept
        assert log[1][1]["input_estimate"] == 123
        assert written[-1][0] == "TaskFinished" and written[-1][1]["answer"] == ANSWER
    elif new_field:  # the fork: answered by its model, its origin kept
        assert first[1][new_field] == "src" and first[1]["forked_at"] == 4
        assert written[-1][0] == "TaskFinished" and written[-1][1]["answer"] == ANSWER
    else:  # the retried job: its call ran once, the retry's origin kept
        assert log[1][1]["retry_of"] == "failed-job"
        assert fleet.ledger.read_text().count(f"{task_id}:") == 1
