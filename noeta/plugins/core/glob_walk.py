"""Glob's walk: the workspace's directories under a base, entered only where the pattern
can still match, never through a link, with the time limit checked at every directory.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from fnmatch import fnmatchcase
from functools import lru_cache
from pathlib import Path

from noeta.core.ports.tool import ToolError

Segments = tuple[str, ...]
Parts = tuple[str, ...]


class TimeLimitReached(Exception):
    """The walk was still going at its deadline."""

    def __init__(self, visited: int) -> None:
        self.visited = visited


def pattern_segments(pattern: str) -> Segments:
    """A glob's path components ('**' alone is any number of directories); ToolError for
    '**' inside a component, as pathlib refuses it."""
    segments: list[str] = []
    for segment in pattern.split("/"):
        if segment in ("", "."):
            continue
        if "**" in segment and segment != "**":
            raise ToolError(
                f"Glob: the pattern {pattern!r} is not usable: '**' can only be an entire "
                "path component"
            )
        if segment == "**" and segments[-1:] == ["**"]:
            continue  # '**/**' is '**'
        segments.append(segment)
    return tuple(segments)


def matching_entries(
    base: Path, segments: Segments, clock: Callable[[], float], deadline: float
) -> Iterator[Path]:
    """Paths under `base` (files, and links of any kind) whose parts match `segments`.

    A directory is entered only if a path under it could match, and never through a
    symbolic link (a link to /usr would make one Glob walk the system). The clock is read
    once per directory: a walk that finds nothing still stops at `deadline`.
    """
    pending: list[tuple[Path, Parts]] = [(base, ())]
    visited = 0
    while pending:
        directory, parts = pending.pop()
        if clock() > deadline:
            raise TimeLimitReached(visited)
        visited += 1
        try:
            with os.scandir(directory) as listing:
                entries = list(listing)
        except OSError:
            continue  # unreadable or gone: skipped, as a shell glob does
        for entry in entries:
            entry_parts = (*parts, entry.name)
            try:
                is_directory = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if is_directory:
                if _may_lead_to_match(segments, entry_parts):
                    pending.append((Path(entry.path), entry_parts))
            elif _matches(segments, entry_parts):
                yield Path(entry.path)


# Bounded: a worker globs for ever, and every walked path would stay in an unbounded cache.
@lru_cache(maxsize=4096)
def _matches(segments: Segments, parts: Parts) -> bool:
    if not segments:
        return not parts
    head, rest = segments[0], segments[1:]
    if head == "**":
        return _matches(rest, parts) or (bool(parts) and _matches(segments, parts[1:]))
    return bool(parts) and fnmatchcase(parts[0], head) and _matches(rest, parts[1:])


@lru_cache(maxsize=4096)
def _may_lead_to_match(segments: Segments, parts: Parts) -> bool:
    """Whether a directory at `parts` can hold (at any depth) a path matching `segments`."""
    if not parts:
        return bool(segments)
    if not segments:
        return False
    head, rest = segments[0], segments[1:]
    if head == "**":
        return _may_lead_to_match(rest, parts) or _may_lead_to_match(segments, parts[1:])
    return fnmatchcase(parts[0], head) and _may_lead_to_match(rest, parts[1:])
