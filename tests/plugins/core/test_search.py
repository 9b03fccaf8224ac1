"""Glob and Grep: sorted, relative, capped, and blind to binaries and .git."""

from __future__ import annotations

from pathlib import Path

import pytest

from noeta.core.ports.tool import ToolContext, ToolError
from noeta.plugins.core import Glob, Grep


@pytest.fixture
def tree(workspace: Path) -> Path:
    for name, text in {
        "README.md": "Hello world\n",
        "setup.py": "import os\nprint('hello')\n",
        "src/app.py": "def main():\n    return 'Hello'\n",
        "src/util/strings.py": "HELLO = 1\n",
        "src/data.json": '{"hello": true}\n',
        ".git/config": "hello from git\n",
    }.items():
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_text(text)
    (workspace / "image.bin").write_bytes(b"\x00hello\x00")
    return workspace


@pytest.mark.usefixtures("tree")
async def test_glob_lists_matching_files_sorted(ctx: ToolContext) -> None:
    everywhere = await Glob().run({"pattern": "**/*.py"}, ctx)
    assert everywhere.content == "setup.py\nsrc/app.py\nsrc/util/strings.py"
    top = await Glob().run({"pattern": "*.py"}, ctx)
    assert top.content == "setup.py"
    under = await Glob().run({"pattern": "*", "path": "src"}, ctx)
    assert under.content == "src/app.py\nsrc/data.json"  # files only, not src/util


@pytest.mark.usefixtures("tree")
async def test_glob_with_no_match(ctx: ToolContext) -> None:
    assert (await Glob().run({"pattern": "*.rs"}, ctx)).content == "No files match '*.rs'"


async def test_glob_cap(workspace: Path, ctx: ToolContext) -> None:
    for n in range(5):
        (workspace / f"f{n}.txt").write_text("")
    output = await Glob(max_results=3).run({"pattern": "*.txt"}, ctx)
    assert output.content == (
        "f0.txt\nf1.txt\nf2.txt\n[2 more of 5 files not shown; narrow the pattern or the path]"
    )


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [("../*", "contains '..'"), ("/etc/*", "is absolute"), ("**x", "not usable")],
)
async def test_glob_refuses_patterns(pattern: str, reason: str, ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match=reason):
        await Glob().run({"pattern": pattern}, ctx)


@pytest.mark.usefixtures("tree")
async def test_glob_path_must_be_a_directory(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="is not a directory"):
        await Glob().run({"pattern": "*", "path": "setup.py"}, ctx)


@pytest.mark.usefixtures("tree")
async def test_grep_reports_path_line_text(ctx: ToolContext) -> None:
    output = await Grep().run({"pattern": "hello"}, ctx)
    # .git and the binary file are skipped; case matters by default.
    assert output.content == "setup.py:2:print('hello')\nsrc/data.json:1:{\"hello\": true}"


@pytest.mark.usefixtures("tree")
async def test_grep_case_insensitive_and_glob_filters(ctx: ToolContext) -> None:
    by_name = await Grep().run({"pattern": "hello", "case_insensitive": True, "glob": "*.py"}, ctx)
    assert by_name.content.splitlines() == [
        "setup.py:2:print('hello')",
        "src/app.py:2:    return 'Hello'",
        "src/util/strings.py:1:HELLO = 1",
    ]
    by_path = await Grep().run(
        {"pattern": "hello", "case_insensitive": True, "glob": "src/*.py"}, ctx
    )
    assert [line.split(":")[0] for line in by_path.content.splitlines()] == [
        "src/app.py",
        "src/util/strings.py",  # fnmatch's '*' also crosses '/'
    ]
    any_depth = await Grep().run({"pattern": "os", "glob": "**/setup.py"}, ctx)
    assert any_depth.content == "setup.py:1:import os"


@pytest.mark.usefixtures("tree")
async def test_grep_one_file(ctx: ToolContext) -> None:
    output = await Grep().run({"pattern": "^def", "path": "src/app.py"}, ctx)
    assert output.content == "src/app.py:1:def main():"


async def test_grep_cap(workspace: Path, ctx: ToolContext) -> None:
    (workspace / "many.txt").write_text("match\n" * 10)
    output = await Grep(max_lines=3).run({"pattern": "match"}, ctx)
    assert output.content.splitlines() == [
        "many.txt:1:match",
        "many.txt:2:match",
        "many.txt:3:match",
        "[stopped after 3 matching lines; narrow the pattern, path or glob]",
    ]


async def test_grep_clips_long_lines(workspace: Path, ctx: ToolContext) -> None:
    (workspace / "long.txt").write_text("needle" + "x" * 1000 + "\n")
    output = await Grep().run({"pattern": "needle"}, ctx)
    assert output.content.endswith("… [606 more chars]")
    assert len(output.content) < 500


async def test_grep_errors(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="not a valid regular expression"):
        await Grep().run({"pattern": "("}, ctx)
    with pytest.raises(ToolError, match="does not exist"):
        await Grep().run({"pattern": "x", "path": "nowhere"}, ctx)
    assert (await Grep().run({"pattern": "x"}, ctx)).content == "No matches for 'x'"
