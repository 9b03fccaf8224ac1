"""The examples run: examples/app/ (Starlette, through TestClient) and examples/jobs.py,
against a real store and a real `noeta worker` configured as the app's README says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from examples import jobs
from examples.app.main import create_app
from noeta.backends.stores import open_store
from noeta.client import AsyncClient, Client
from tests.worker.conftest import WorkerProcess

REPOSITORY = Path(__file__).parents[2]


@pytest.fixture
async def store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'noeta.db'}"
    opened = await open_store(url, migrate=True)
    await opened.close()
    return url


@pytest.fixture
def worker(store: str, tmp_path: Path) -> Iterator[WorkerProcess]:
    env = {
        "NOETA_CONFIG": str(REPOSITORY / "examples/app/noeta.yaml"),
        "EXAMPLES_OUTBOX": str(tmp_path / "outbox.jsonl"),
    }
    started = WorkerProcess(store, "w", tmp_path, poll=0.1, env=env)
    yield started
    started.stop()


def test_the_app_answers_a_question_and_enqueues_a_job(
    store: str, worker: WorkerProcess, tmp_path: Path
) -> None:
    model = tmp_path / "model.yaml"
    model.write_text(json.dumps({"replies": [{"text": "a durable runtime"}]}))
    picture = tmp_path / "cat.png"
    picture.write_bytes(bytes(range(256)) * 64)
    with TestClient(create_app(store, model=f"scripted:{model}")) as http:
        asked = http.post("/ask", json={"question": "What is noeta?"})
        assert asked.status_code == 200, asked.text
        assert asked.json()["answer"] == "a durable runtime"
        assert http.post("/ask", json={}).status_code == 400
        made = http.post("/thumbnails", json={"path": str(picture), "width": 4})
        assert made.status_code == 202, made.text
        refused = http.post("/thumbnails", json={"path": str(picture), "width": "wide"})
        assert refused.status_code == 400 and "width" in refused.json()["error"]
        task = made.json()["task"]
        with Client(store) as waiting:  # waits on the store, not on a timer
            waiting.result(task, timeout=60)
        status = http.get(f"/tasks/{task}").json()
        assert json.loads(status["result"]) == {
            "thumbnail": str(tmp_path / "cat.w4.png"),
            "width": 4,
        }
        assert (tmp_path / "cat.w4.png").read_bytes() == picture.read_bytes()[:64]
        assert http.get("/tasks/nobody").status_code == 404


async def test_the_receipt_job_is_sent_once(
    store: str, worker: WorkerProcess, tmp_path: Path
) -> None:
    assert jobs.send_receipt.__name__ == "send_receipt"
    async with AsyncClient(store) as client:
        task = await client.enqueue("send_receipt", {"order": "o-7", "cents": 1250}, id="r7")
        assert await client.job_result(task, timeout=60) == {
            "sent": "o-7",
            "found_by_recover": False,
        }
    sent = [json.loads(line) for line in (tmp_path / "outbox.jsonl").read_text().splitlines()]
    assert sent == [{"key": "r7:job", "order": "o-7", "cents": 1250}]


def test_the_celery_style_example_runs_on_two_workers(store: str, tmp_path: Path) -> None:
    env = {"NOETA_CONFIG": str(REPOSITORY / "examples/app/noeta.yaml")}
    workers = [WorkerProcess(store, name, tmp_path, poll=0.1, env=env) for name in ("w1", "w2")]
    picture = tmp_path / "cat.png"
    picture.write_bytes(bytes(range(256)) * 64)
    try:
        ran = run_example(store, "examples.celery_style", str(picture))
    finally:
        for worker in workers:
            worker.stop()
    assert ran.returncode == 0, ran.stderr
    widths = [json.loads(line.split(": ", 1)[1])["width"] for line in ran.stdout.splitlines()]
    assert widths == [4, 8, 16, 32, 64]
    for width in (4, 8, 16, 32, 64):
        assert (tmp_path / f"cat.w{width}.png").read_bytes() == picture.read_bytes()[: width * 16]


def test_the_canvas_example_runs_a_chord_and_a_chain(
    store: str, worker: WorkerProcess, tmp_path: Path
) -> None:
    ran = run_example(store, "examples.canvas")
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[:2] == ["words: 9", "scaled: 60"]
    members = lines[2:]
    assert [line.split()[1:] for line in members] == [
        ["count_words", "done"],
        ["count_words", "done"],
        ["count_words", "done"],
        ["add_up", "done"],
    ]


def run_example(store: str, module: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    """`python -m <module> ARGUMENTS` from the repository's root, on `store`."""
    return subprocess.run(
        [sys.executable, "-m", module, *arguments],
        cwd=REPOSITORY,
        env={**os.environ, "NOETA_STORE": store},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
