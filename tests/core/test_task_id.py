"""The task id rule and the workspace folder an id names: no id leaves the workspaces root."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from noeta.backends.stores import open_store
from noeta.core.errors import PayloadError
from noeta.core.ports.store import NewEvent, NewTask
from noeta.core.rules.task_id import MAX_TASK_ID_CHARS, check_task_id, workspace_folder
from noeta.core.runner.task import TaskRunner


def short(value: object) -> str:
    return repr(value)[:24]


BAD_IDS = ["..", ".", "a/../b", "/etc", "x" * 10_000, "a\x00b", "", ".hidden", "a b", "é"]


@pytest.mark.parametrize("bad", BAD_IDS, ids=short)
def test_a_new_task_with_a_bad_id_is_refused_naming_the_rule(bad: str) -> None:
    with pytest.raises(PayloadError, match=r"a task id is 1-128 characters of letters"):
        NewTask(bad, [NewEvent("created", {})])
    with pytest.raises(PayloadError, match=r"not starting with '\.'"):
        check_task_id(bad)


@pytest.mark.parametrize("good", ["a", "demo", "cron-nightly-20250101T0000Z", "parent.c1.1",
                                  "x" * MAX_TASK_ID_CHARS, "A_b:c-d.e"])  # fmt: skip
def test_ids_within_the_rule_are_their_own_folder(good: str) -> None:
    assert check_task_id(good) == good
    assert workspace_folder(good) == good


@pytest.mark.parametrize(
    "task_id", [*BAD_IDS, "%2E%2E", "a/b", "a%2Fb", "\udc80", "../" * 300], ids=short
)
def test_no_id_names_a_folder_outside_the_workspaces_root(tmp_path: Path, task_id: str) -> None:
    """Ids from before the rule (or from anywhere) still get a folder inside the root."""
    root = tmp_path / "workspaces"
    workspace = Path(asyncio.run(workspace_of(tmp_path / "noeta.db", root, task_id)))
    assert workspace.parent == root
    assert workspace.name not in (".", "..") and not workspace.name.startswith(".")
    assert "/" not in workspace.name and "\x00" not in workspace.name
    assert len(workspace.name.encode()) <= 255
    assert os.path.realpath(workspace).startswith(str(root) + os.sep)


def test_distinct_ids_get_distinct_folders() -> None:
    ids = ["a/b", "a_b", "a%2Fb", "a%b", ".a", "%2Ea", "..", "%2E%2E", "a b", "a+b"]
    assert len({workspace_folder(task_id) for task_id in ids}) == len(ids)


async def workspace_of(database: Path, root: Path, task_id: str) -> str:
    """The folder a runner gives `task_id` under `root` (on a real store, as any runner)."""
    store = await open_store(f"sqlite:///{database}")
    try:
        return TaskRunner(store=store, providers=None, workspaces=str(root)).workspace_for(task_id)  # type: ignore[arg-type]
    finally:
        await store.close()
