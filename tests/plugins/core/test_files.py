"""Read, Write and Edit in normal use, and the errors a model must be able to act on."""

from __future__ import annotations

from pathlib import Path

import pytest

from noeta.core.ports.payload import JSONValue
from noeta.core.ports.tool import ToolContext, ToolError, ToolOutput
from noeta.plugins.core import Edit, Read, Write
from noeta.plugins.core.files import MAX_READ_CHARS


async def test_read_numbers_the_lines(workspace: Path, ctx: ToolContext) -> None:
    (workspace / "a.txt").write_bytes(b"one\ntwo\r\nthree")
    output = await Read().run({"file_path": "a.txt"}, ctx)
    assert output == ToolOutput("     1\tone\n     2\ttwo\n     3\tthree")


async def test_read_offset_and_limit(workspace: Path, ctx: ToolContext) -> None:
    (workspace / "a.txt").write_text("".join(f"line {n}\n" for n in range(1, 11)))
    output = await Read().run({"file_path": "a.txt", "offset": 4, "limit": 2}, ctx)
    assert output.content == (
        "     4\tline 4\n     5\tline 5\n[stopped after 2 lines; more follow from offset=6]"
    )
    last = await Read().run({"file_path": "a.txt", "offset": 9, "limit": 2}, ctx)
    assert last.content == "     9\tline 9\n    10\tline 10"
    past = await Read().run({"file_path": "a.txt", "offset": 20}, ctx)
    assert past.content == "(a.txt has 10 lines; offset=20 is past the end)"


async def test_read_cuts_at_the_cap_and_says_where_to_go_on(
    workspace: Path, ctx: ToolContext
) -> None:
    (workspace / "big.txt").write_text("".join(f"{n:099d}\n" for n in range(1, 5001)))
    output = await Read().run({"file_path": "big.txt"}, ctx)
    assert len(output.content) <= MAX_READ_CHARS + 100
    last_line = output.content.splitlines()[-2]
    next_offset = int(last_line.split("\t")[0]) + 1
    assert output.content.endswith(f"[output cut at 256 KiB; read on with offset={next_offset}]")
    rest = await Read().run({"file_path": "big.txt", "offset": next_offset, "limit": 1}, ctx)
    assert rest.content.startswith(f"{next_offset:>6}\t{next_offset:099d}")


async def test_read_cuts_one_huge_line(workspace: Path, ctx: ToolContext) -> None:
    (workspace / "min.js").write_text("x" * (MAX_READ_CHARS * 2))
    output = await Read().run({"file_path": "min.js"}, ctx)
    assert output.content.endswith(
        f"[line 1 cut at {MAX_READ_CHARS:,} characters; read on with offset=2]"
    )
    assert len(output.content) < MAX_READ_CHARS + 100


async def test_read_shows_invalid_utf8_as_replacement(workspace: Path, ctx: ToolContext) -> None:
    (workspace / "latin.txt").write_bytes(b"caf\xe9\n")
    assert (await Read().run({"file_path": "latin.txt"}, ctx)).content == "     1\tcaf\ufffd"


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        ("missing", "does not exist"),
        ("directory", "is a directory"),
        ("binary", "looks binary"),
    ],
)
async def test_read_refusals(setup: str, reason: str, workspace: Path, ctx: ToolContext) -> None:
    if setup == "directory":
        (workspace / "target").mkdir()
    elif setup == "binary":
        (workspace / "target").write_bytes(b"\x89PNG\x00\x00data")
    with pytest.raises(ToolError, match=reason):
        await Read().run({"file_path": "target"}, ctx)


async def test_read_empty_file(workspace: Path, ctx: ToolContext) -> None:
    (workspace / "empty.txt").write_text("")
    assert (await Read().run({"file_path": "empty.txt"}, ctx)).content == "(empty.txt is empty)"


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({"offest": 2}, "unknown input 'offest'"),
        ({"offset": "2"}, "'offset' must be an integer"),
        ({"offset": True}, "'offset' must be an integer"),
        ({"offset": 0}, "at least 1"),
        ({"limit": -1}, "at least 1"),
    ],
)
async def test_read_checks_its_input(
    extra: dict[str, JSONValue], reason: str, workspace: Path, ctx: ToolContext
) -> None:
    (workspace / "a.txt").write_text("a\n")
    with pytest.raises(ToolError, match=reason):
        await Read().run({"file_path": "a.txt", **extra}, ctx)


async def test_read_requires_a_path(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="'file_path' is required"):
        await Read().run({}, ctx)


async def test_write_creates_parents_and_overwrites(workspace: Path, ctx: ToolContext) -> None:
    created = await Write().run({"file_path": "src/pkg/mod.py", "content": "a\r\nb\n"}, ctx)
    assert created.content == "Created src/pkg/mod.py (2 lines, 5 chars)"
    assert (workspace / "src/pkg/mod.py").read_bytes() == b"a\r\nb\n"
    again = await Write().run({"file_path": "src/pkg/mod.py", "content": "c"}, ctx)
    assert again.content == "Overwrote src/pkg/mod.py (1 line, 1 char)"
    assert (workspace / "src/pkg/mod.py").read_text() == "c"


async def test_write_refuses_a_directory(workspace: Path, ctx: ToolContext) -> None:
    (workspace / "dir").mkdir()
    with pytest.raises(ToolError, match="is a directory"):
        await Write().run({"file_path": "dir", "content": "x"}, ctx)


async def test_edit_replaces_a_unique_string(workspace: Path, ctx: ToolContext) -> None:
    (workspace / "m.py").write_text("def f():\n    return 1\n")
    output = await Edit().run(
        {"file_path": "m.py", "old_string": "return 1", "new_string": "return 2"}, ctx
    )
    assert output.content == "Replaced 1 occurrence in m.py"
    assert (workspace / "m.py").read_text() == "def f():\n    return 2\n"


async def test_edit_refuses_an_ambiguous_string(workspace: Path, ctx: ToolContext) -> None:
    (workspace / "m.py").write_text("x = 1\ny = 1\n")
    with pytest.raises(ToolError, match=r"occurs 2 times in m\.py.*replace_all"):
        await Edit().run({"file_path": "m.py", "old_string": "1", "new_string": "2"}, ctx)
    assert (workspace / "m.py").read_text() == "x = 1\ny = 1\n"
    output = await Edit().run(
        {"file_path": "m.py", "old_string": "1", "new_string": "2", "replace_all": True}, ctx
    )
    assert output.content == "Replaced 2 occurrences in m.py"
    assert (workspace / "m.py").read_text() == "x = 2\ny = 2\n"


@pytest.mark.parametrize(
    ("old", "new", "reason"),
    [
        ("absent", "x", "was not found in m.py"),
        ("", "x", "old_string is empty"),
        ("same", "same", "the same"),
    ],
)
async def test_edit_errors(
    old: str, new: str, reason: str, workspace: Path, ctx: ToolContext
) -> None:
    (workspace / "m.py").write_text("same\n")
    with pytest.raises(ToolError, match=reason):
        await Edit().run({"file_path": "m.py", "old_string": old, "new_string": new}, ctx)


async def test_edit_a_missing_file(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="does not exist"):
        await Edit().run({"file_path": "no.py", "old_string": "a", "new_string": "b"}, ctx)


async def test_edit_keeps_bytes_that_are_not_utf8(workspace: Path, ctx: ToolContext) -> None:
    (workspace / "mixed.txt").write_bytes(b"caf\xe9\r\nold\r\n")
    await Edit().run({"file_path": "mixed.txt", "old_string": "old", "new_string": "new"}, ctx)
    assert (workspace / "mixed.txt").read_bytes() == b"caf\xe9\r\nnew\r\n"
