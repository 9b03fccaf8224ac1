"""`noeta scheduler`'s start-up refusals: each one line, exit 1, nothing fired."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_run import noeta, one_line_error


def cron(tmp_path: Path, **task: object) -> Path:
    entry = {
        "name": "nightly",
        "schedule": "0 3 * * *",
        "task": {"prompt": "p", "model": "scripted:x.yaml", **task},
    }
    path = tmp_path / "cron.yaml"
    path.write_text(json.dumps({"schedules": [entry]}))
    return path


def test_a_schedule_naming_a_plugin_the_config_lacks_stops_the_start(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'noeta.db'}"
    result = noeta("scheduler", "--cron", str(cron(tmp_path, plugins=["nope"])), store=store)
    line = one_line_error(result)
    assert "cron.yaml, line 1: schedule 'nightly' names plugins" in line and "nope" in line
    assert not (tmp_path / "noeta.db").exists()  # refused before the store was opened


def test_a_missing_cron_file_stops_the_start(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'noeta.db'}"
    line = one_line_error(noeta("scheduler", "--cron", str(tmp_path / "nope.yaml"), store=store))
    assert "nope.yaml" in line


def test_two_files_with_one_schedule_name_stop_the_start(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'noeta.db'}"
    first = cron(tmp_path)
    second = tmp_path / "more.yaml"
    second.write_text(first.read_text())
    line = one_line_error(
        noeta("scheduler", "--cron", str(first), "--cron", str(second), store=store)
    )
    assert "'nightly' is used already" in line
