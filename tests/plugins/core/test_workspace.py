"""Every file tool refuses what leads outside the workspace, for a reason it states."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from noeta.core.ports.payload import JSONValue
from noeta.core.ports.tool import Tool, ToolContext, ToolError
from noeta.plugins.core import Bash, Edit, Glob, Grep, Read, Write

Call = Callable[[str], dict[str, JSONValue]]

FILE_TOOLS: list[tuple[Tool, Call]] = [
    (Read(), lambda path: {"file_path": path}),
    (Write(), lambda path: {"file_path": path, "content": "overwritten"}),
    (Edit(), lambda path: {"file_path": path, "old_string": "secret", "new_string": "gone"}),
    (Glob(), lambda path: {"pattern": "*", "path": path}),
    (Grep(), lambda path: {"pattern": "secret", "path": path}),
]
TOOL_IDS = [tool.name for tool, _ in FILE_TOOLS]


@pytest.fixture
def links(workspace: Path, outside: Path) -> None:
    (workspace / "linked_dir").symlink_to(outside, target_is_directory=True)
    (workspace / "linked_file.txt").symlink_to(outside / "secret.txt")
    (workspace / "dangling.txt").symlink_to(outside / "not_yet.txt")


@pytest.mark.parametrize("tool_call", FILE_TOOLS, ids=TOOL_IDS)
@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("../outside/secret.txt", "contains '..'"),
        ("sub/../../outside/secret.txt", "contains '..'"),
        ("/etc/passwd", "is absolute"),
        ("linked_dir", "outside the workspace"),
        ("linked_dir/secret.txt", "outside the workspace"),
        ("linked_file.txt", "outside the workspace"),
    ],
)
@pytest.mark.usefixtures("links")
async def test_paths_leading_outside_are_refused(
    tool_call: tuple[Tool, Call], path: str, reason: str, ctx: ToolContext, outside: Path
) -> None:
    tool, call = tool_call
    with pytest.raises(ToolError, match=reason):
        await tool.run(call(path), ctx)
    assert (outside / "secret.txt").read_text() == "the secret\n"


@pytest.mark.usefixtures("links")
async def test_a_dangling_link_leading_outside_is_not_created_through(
    ctx: ToolContext, outside: Path
) -> None:
    with pytest.raises(ToolError, match="outside the workspace"):
        await Write().run({"file_path": "dangling.txt", "content": "x"}, ctx)
    assert not (outside / "not_yet.txt").exists()


@pytest.mark.parametrize(("tool", "call"), FILE_TOOLS, ids=TOOL_IDS)
async def test_an_empty_workspace_means_no_file_access(tool: Tool, call: Call) -> None:
    with pytest.raises(ToolError, match="no file access"):
        await tool.run(call("notes.txt"), ToolContext("task-1", "call-1", workspace=""))


async def test_bash_needs_a_workspace_too() -> None:
    with pytest.raises(ToolError, match="no file access"):
        await Bash().run({"command": "pwd"}, ToolContext("task-1", "call-1", workspace=""))


@pytest.mark.usefixtures("links")
async def test_searches_do_not_follow_links_outside(ctx: ToolContext) -> None:
    everything = await Glob().run({"pattern": "**/*"}, ctx)
    assert "secret" not in everything.content
    linked = await Glob().run({"pattern": "linked_dir/*"}, ctx)
    assert linked.content == "No files match 'linked_dir/*'"
    found = await Grep().run({"pattern": "secret"}, ctx)
    assert found.content == "No matches for 'secret'"


async def test_links_that_stay_inside_are_followed(workspace: Path, ctx: ToolContext) -> None:
    (workspace / "real.txt").write_text("inside\n")
    (workspace / "alias.txt").symlink_to(workspace / "real.txt")
    output = await Read().run({"file_path": "alias.txt"}, ctx)
    assert output.content == "     1\tinside"


async def test_a_missing_workspace_is_created(tmp_path: Path) -> None:
    ctx = ToolContext("task-1", "call-1", workspace=str(tmp_path / "new" / "workspace"))
    await Write().run({"file_path": "a/b.txt", "content": "hello"}, ctx)
    assert (tmp_path / "new" / "workspace" / "a" / "b.txt").read_text() == "hello"


async def test_a_workspace_reached_through_a_link_still_works(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "via").symlink_to(tmp_path / "real", target_is_directory=True)
    ctx = ToolContext("task-1", "call-1", workspace=str(tmp_path / "via"))
    await Write().run({"file_path": "f.txt", "content": "x"}, ctx)
    assert (tmp_path / "real" / "f.txt").read_text() == "x"
    assert (await Glob().run({"pattern": "*"}, ctx)).content == "f.txt"


@pytest.mark.parametrize("path", ["", "a\x00b"])
async def test_empty_and_nul_paths_are_refused(path: str, ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match=r"empty|NUL"):
        await Read().run({"file_path": path}, ctx)


def test_a_folder_swapped_for_a_link_after_the_check_is_not_followed(
    workspace: Path, outside: Path
) -> None:
    """The check-then-use race: `confine` passed `dir/secret.txt`, then a background
    command replaced `dir` with a link to outside; the open must not follow it."""
    from noeta.plugins.core.workspace import confine, open_confined

    (workspace / "dir").mkdir()
    (workspace / "dir" / "secret.txt").write_text("inside\n")
    root = workspace.resolve()
    real = confine(root, "dir/secret.txt")
    (workspace / "dir" / "secret.txt").unlink()
    (workspace / "dir").rmdir()
    (workspace / "dir").symlink_to(outside)
    with pytest.raises(ToolError, match="changed while it was being opened"):
        open_confined(root, real).read()


def test_a_file_swapped_for_a_link_after_the_check_is_not_followed(
    workspace: Path, outside: Path
) -> None:
    from noeta.plugins.core.workspace import confine, open_confined

    (workspace / "notes.txt").write_text("inside\n")
    root = workspace.resolve()
    real = confine(root, "notes.txt")
    (workspace / "notes.txt").unlink()
    (workspace / "notes.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(ToolError, match="changed while it was being opened"):
        open_confined(root, real).read()


async def test_reading_a_fifo_is_refused_instead_of_hanging(
    workspace: Path, ctx: ToolContext
) -> None:
    os.mkfifo(workspace / "pipe")
    with pytest.raises(ToolError, match="pipe is not a regular file"):
        await Read().run({"file_path": "pipe"}, ctx)
