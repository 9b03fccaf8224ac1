"""The cron file ops/compose.yaml mounts is one the scheduler accepts."""

from __future__ import annotations

from pathlib import Path

from noeta.scheduler.cronfile import TaskAction, load_cron_files

OPS = Path(__file__).parents[2] / "ops"


def test_the_compose_cron_file_loads() -> None:
    (schedule,) = load_cron_files([OPS / "cron.yaml"])
    assert schedule.name == "nightly-summary" and isinstance(schedule.action, TaskAction)
    assert "--cron" in (OPS / "compose.yaml").read_text()
