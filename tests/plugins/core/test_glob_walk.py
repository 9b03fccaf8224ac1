"""Glob's walk is bounded while it walks, not only when it finds something: its time
limit is checked at every directory (on an injected clock: no timing here), and linked
directories are not walked into, so links to a large tree cost nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from noeta.core.ports.tool import ToolContext, ToolError
from noeta.plugins.core import Glob


class Ticks:
    """A clock that moves one second each time it is read: one read per directory."""

    def __init__(self) -> None:
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return float(self.reads)


def deep_tree(top: Path, directories: int) -> None:
    for number in range(directories):
        (top / f"d{number // 20}" / f"e{number}").mkdir(parents=True, exist_ok=True)


async def test_a_walk_that_matches_nothing_still_stops_at_the_time_limit(
    workspace: Path, ctx: ToolContext
) -> None:
    deep_tree(workspace, 400)
    clock = Ticks()
    with pytest.raises(
        ToolError, match=r"still walking the workspace after 25 s \(25 directories visited\)"
    ):
        await Glob(time_limit_seconds=25, clock=clock).run({"pattern": "**/*.nothing"}, ctx)
    assert clock.reads <= 30  # stopped at the limit, not at the end of 420 directories


async def test_links_to_a_large_tree_are_not_walked(
    workspace: Path, tmp_path: Path, ctx: ToolContext
) -> None:
    big = tmp_path / "big"
    deep_tree(big, 400)
    (big / "d0" / "e0" / "far.txt").write_text("")
    for number in range(30):
        (workspace / f"link{number}").symlink_to(big, target_is_directory=True)
    (workspace / "src").mkdir()
    (workspace / "src" / "near.txt").write_text("")
    clock = Ticks()
    output = await Glob(time_limit_seconds=10**9, clock=clock).run({"pattern": "**/*.txt"}, ctx)
    assert output.content == "src/near.txt"
    assert clock.reads <= 3  # the start, the workspace and src: no linked directory


async def test_a_pattern_without_double_star_walks_only_the_levels_it_names(
    workspace: Path, ctx: ToolContext
) -> None:
    deep_tree(workspace / "other", 400)
    (workspace / "src" / "pkg").mkdir(parents=True)
    (workspace / "src" / "pkg" / "a.py").write_text("")
    (workspace / "src" / "b.py").write_text("")
    clock = Ticks()
    output = await Glob(clock=clock).run({"pattern": "src/*/*.py"}, ctx)
    assert output.content == "src/pkg/a.py"
    assert clock.reads <= 4  # the start, the workspace, src, src/pkg


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("**/*.py", "a.py\nsrc/b.py\nsrc/deep/er/c.py"),
        ("src/**/*.py", "src/b.py\nsrc/deep/er/c.py"),
        ("**/er/*.py", "src/deep/er/c.py"),
        ("*.py", "a.py"),
        ("src/*", "src/.hidden\nsrc/b.py"),
        ("./src/b.py", "src/b.py"),
        ("src/[ab].py", "src/b.py"),
        ("**/.hidden", "src/.hidden"),
    ],
)
async def test_glob_patterns_match_as_before(
    workspace: Path, ctx: ToolContext, pattern: str, expected: str
) -> None:
    for name in ("a.py", "src/b.py", "src/.hidden", "src/deep/er/c.py"):
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_text("")
    assert (await Glob().run({"pattern": pattern}, ctx)).content == expected
