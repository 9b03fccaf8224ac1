"""A workspace per test, with a directory beside it that tools must never reach."""

from __future__ import annotations

from pathlib import Path

import pytest

from noeta.core.ports.tool import ToolContext


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text("the secret\n")
    return path


@pytest.fixture
def ctx(workspace: Path) -> ToolContext:
    return ToolContext(task_id="task-1", call_id="call-1", workspace=str(workspace))
