"""`noeta submit --job NAME --input JSON` as a user runs it, its bad input, and the job's
result read back through `noeta show`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from noeta.client import AsyncClient
from tests.cli.test_run import noeta, one_line_error
from tests.worker.conftest import WorkerProcess


@pytest.fixture
def config(tmp_path: Path) -> str:
    path = tmp_path / "noeta.yaml"
    path.write_text("plugins:\n  - module: tests.client.jobs_for_tests\n")
    return str(path)


async def test_submit_job_enqueues_and_show_has_the_result(
    tmp_path: Path, config: str, job_workers: Callable[..., WorkerProcess]
) -> None:
    store = f"sqlite:///{tmp_path / 'noeta.db'}"
    given = json.dumps({"image": "c.png", "width": 3})
    made = noeta(
        "submit", "--job", "resize", "--input", given, "--id", "j1", "--config", config, store=store
    )
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == "j1"
    job_workers(store, "w", poll=0.1)
    async with AsyncClient(store) as client:
        assert await client.job_result("j1", timeout=60) == {"image": "c.png", "width": 3}
    shown = json.loads(noeta("show", "j1", "--json", store=store).stdout)
    assert shown["task"]["status"] == "done"
    assert shown["log"][-1]["data"]["answer"] == '{"image": "c.png", "width": 3}'


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--job", "refund"], "no job named 'refund'"),
        (["--job", "resize", "--input", "{not json"], "--input is not JSON"),
        (["--job", "resize", "--input", "[1]"], "--input must be a JSON object"),
        (["--job", "resize", "--input", '{"image": "a"}'], "'width' is a required property"),
        (["--job", "resize", "--interactive"], "a job takes --input"),
        (["hello", "--input", "{}"], "--input is for a job"),
    ],
)
def test_submit_job_refuses_bad_input_in_one_line(
    tmp_path: Path, config: str, arguments: list[str], message: str
) -> None:
    store = f"sqlite:///{tmp_path / 'noeta.db'}"
    refused = noeta("submit", *arguments, "--config", config, store=store)
    assert message in one_line_error(refused)
    assert noeta("tasks", "--json", store=store).stdout.strip() == "[]"  # nothing written
