"""Grep and Glob are bounded: a runaway regex, a huge file or a flood of matches ends with
a tool error or a note the model reads, never a hung worker."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from noeta.core.ports.tool import ToolContext, ToolError
from noeta.plugins.core import Glob, Grep


async def test_a_catastrophic_regex_is_stopped_and_the_event_loop_keeps_running(
    workspace: Path, ctx: ToolContext
) -> None:
    (workspace / "evil.txt").write_text("a" * 5_000 + "!\n")
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.05)
            ticks += 1

    ticker = asyncio.create_task(tick())
    started = time.monotonic()
    try:
        with pytest.raises(ToolError, match=r"ran past its time limit of 2 s and was stopped"):
            await Grep(time_limit_seconds=2).run({"pattern": "(a+)+$"}, ctx)
    finally:
        ticker.cancel()
    assert time.monotonic() - started < 10
    assert ticks >= 10  # the loop (and so lease renewal) ran all along


async def test_a_file_over_the_size_limit_is_not_searched_and_says_so(
    workspace: Path, ctx: ToolContext
) -> None:
    (workspace / "small.txt").write_text("needle\n")
    (workspace / "huge.log").write_text("needle\n" * 500)
    output = await Grep(max_file_bytes=1_000).run({"pattern": "needle"}, ctx)
    assert output.content.splitlines() == [
        "small.txt:1:needle",
        "[not searched, over 1,000 bytes: huge.log; Read them in parts instead]",
    ]


async def test_too_many_matching_lines_stop_with_a_note(workspace: Path, ctx: ToolContext) -> None:
    (workspace / "many.txt").write_text("hit\n" * 50)
    output = await Grep(max_lines=10).run({"pattern": "hit"}, ctx)
    assert output.content.splitlines()[-1].startswith("[stopped after 10 matching lines")


async def test_glob_stops_past_its_match_limit(workspace: Path, ctx: ToolContext) -> None:
    for number in range(30):
        (workspace / f"f{number}.txt").write_text("")
    with pytest.raises(ToolError, match=r"matches more than 20 files; narrow the pattern"):
        await Glob(max_matches=20).run({"pattern": "*.txt"}, ctx)


async def test_glob_stops_at_its_time_limit(workspace: Path, ctx: ToolContext) -> None:
    (workspace / "a.txt").write_text("")
    with pytest.raises(ToolError, match=r"still walking the workspace after 0 s"):
        await Glob(time_limit_seconds=0).run({"pattern": "**/*.txt"}, ctx)
