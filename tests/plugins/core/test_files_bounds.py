"""Read and Edit hold a bounded amount of a file, whatever its size or line lengths: a
600 MB sparse file of one line is read in chunks (measured in a child process's peak
memory), Edit refuses a file over its bound, and a FIFO or device is refused at once."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from noeta.core.ports.tool import ToolContext, ToolError
from noeta.plugins.core import Edit, Read
from noeta.plugins.core.files import MAX_EDIT_BYTES, MAX_READ_CHARS

SPARSE_BYTES = 600 * 10**6

# Run in a child process, so that its peak memory (ru_maxrss) is the Read's alone.
CHILD = """
import asyncio, json, resource, sys
from noeta.core.ports.tool import ToolContext
from noeta.plugins.core import Read

async def main():
    ctx = ToolContext("t", "c", sys.argv[1])
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    output = await Read().run({"file_path": "one-line.txt", "limit": 1}, ctx)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"grew_kib": after - before, "end": output.content[-200:]}))

asyncio.run(main())
"""


def sparse_file(path: Path, size: int) -> None:
    """`size` bytes taking almost no disk: 8 KiB of text, then a hole (NUL bytes)."""
    with path.open("wb") as file:
        file.write(b"a" * 8192)  # no NUL in the first block: Read takes it for text
        file.truncate(size)


def test_reading_one_line_of_a_huge_sparse_file_holds_little_memory(workspace: Path) -> None:
    sparse_file(workspace / "one-line.txt", SPARSE_BYTES)
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(workspace)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    report = json.loads(child.stdout)
    assert report["grew_kib"] < 32 * 1024, report  # not the 600 MB line (or 1.5 GB)
    assert report["end"].endswith(
        f"[line 1 cut at {MAX_READ_CHARS:,} characters; read on with offset=2]"
    ), report


async def test_a_long_line_is_cut_and_the_next_lines_still_shown(
    workspace: Path, ctx: ToolContext
) -> None:
    (workspace / "mixed.txt").write_text("short\n" + "x" * (MAX_READ_CHARS * 3) + "\nafter\n")
    output = await Read().run({"file_path": "mixed.txt", "offset": 3}, ctx)
    assert output.content == "     3\tafter"  # the long line was skipped in chunks


async def test_nul_bytes_past_the_binary_probe_are_shown_escaped(
    workspace: Path, ctx: ToolContext
) -> None:
    (workspace / "late.txt").write_bytes(b"a" * 8192 + b"\nb\x00c\n")
    output = await Read().run({"file_path": "late.txt", "offset": 2}, ctx)
    assert output.content == "     2\tb\\x00c"


async def test_edit_refuses_a_file_over_its_bound(workspace: Path, ctx: ToolContext) -> None:
    with (workspace / "huge.txt").open("wb") as file:
        file.write(b"needle\n")
        file.truncate(MAX_EDIT_BYTES + 1)
    call = {"file_path": "huge.txt", "old_string": "needle", "new_string": "pin"}
    with pytest.raises(ToolError, match=r"huge\.txt is 16,777,217 bytes; Edit changes files"):
        await Edit().run(call, ctx)
    assert (workspace / "huge.txt").read_bytes()[:7] == b"needle\n"  # untouched


@pytest.mark.timeout(30)
async def test_a_fifo_is_refused_without_blocking(workspace: Path, ctx: ToolContext) -> None:
    os.mkfifo(workspace / "pipe")  # nobody writes to it: opening it to read would block
    with pytest.raises(ToolError, match="not a regular file"):
        await Read().run({"file_path": "pipe"}, ctx)
    edit = {"file_path": "pipe", "old_string": "a", "new_string": "b"}
    with pytest.raises(ToolError, match="not a regular file"):
        await Edit().run(edit, ctx)


async def test_a_device_is_refused(workspace: Path, ctx: ToolContext) -> None:
    (workspace / "zeros").symlink_to("/dev/zero")
    with pytest.raises(ToolError, match="outside the workspace"):
        await Read().run({"file_path": "zeros"}, ctx)


async def test_a_read_stops_after_its_scan_bound_and_says_where(
    workspace: Path, ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("noeta.plugins.core.files.MAX_SCAN_BYTES", 200_000)
    (workspace / "long.txt").write_text("".join(f"{n:099d}\n" for n in range(1, 5001)))
    output = await Read().run({"file_path": "long.txt", "offset": 4000}, ctx)
    assert re.fullmatch(
        r"\[stopped: Read goes through at most 200,000 bytes of a file, and lines from "
        r"1,9\d\d on lie beyond; use Bash for them \(e\.g\. sed -n '4000,\+99p' long\.txt\)\]",
        output.content,
    ), output.content
