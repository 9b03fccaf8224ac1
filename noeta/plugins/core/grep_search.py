"""The Grep search itself, run in a child process so a runaway regex can be killed.

Python's `re` cannot be interrupted and holds the GIL while it backtracks: `(a+)+$` on a
long line would freeze the whole worker, lease renewal included. In a child process it
costs one process, which Grep kills at its deadline (`python -m` this module: a JSON
request on stdin, a JSON reply on stdout).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from noeta.core.ports.tool import ToolError
from noeta.plugins.core.workspace import confine, open_confined, relative_name, walk_files

BINARY_PROBE_BYTES = 8192  # as git and grep do: a NUL in the first block means binary
MAX_GREP_LINE_CHARS = 400
# A repository's object store is compressed binary and never what a search is after.
SKIPPED_DIRECTORIES = frozenset({".git"})


def search(request: dict[str, Any]) -> dict[str, Any]:
    """{root, where, pattern, flags, glob, max_lines, max_file_bytes} -> {lines} | {error}."""
    try:
        return {"lines": _search(request)}
    except ToolError as error:
        return {"error": str(error)}


def _search(request: dict[str, Any]) -> list[str]:
    root = Path(request["root"])
    regex = re.compile(request["pattern"], request["flags"])
    where, name_glob = request["where"], request["glob"]
    max_lines, max_file_bytes = request["max_lines"], request["max_file_bytes"]
    start = confine(root, where)
    if not start.exists():
        raise ToolError(f"Grep: {where} does not exist")
    found: list[str] = []
    too_big: list[str] = []
    for real in walk_files(root, start, SKIPPED_DIRECTORIES):
        name = relative_name(root, real)
        if name_glob is not None and not _glob_matches(name, name_glob):
            continue
        if real.stat().st_size > max_file_bytes:
            too_big.append(name)
            continue
        for number, line in _text_lines(root, real):
            if not regex.search(line):
                continue
            if len(found) == max_lines:
                found.append(
                    f"[stopped after {max_lines} matching lines; narrow the pattern, path or glob]"
                )
                return found + _skipped_note(too_big, max_file_bytes)
            found.append(f"{name}:{number}:{_clip(line)}")
    return found + _skipped_note(too_big, max_file_bytes)


def _skipped_note(names: list[str], limit: int) -> list[str]:
    if not names:
        return []
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return [f"[not searched, over {limit:,} bytes: {shown}; Read them in parts instead]"]


def _glob_matches(name: str, pattern: str) -> bool:
    """Like ripgrep's -g: a pattern without '/' is matched against the file name only."""
    if "/" not in pattern:
        return fnmatchcase(name.rsplit("/", 1)[-1], pattern)
    # '**/' may stand for no directory at all, as it does in Glob.
    if pattern.startswith("**/") and fnmatchcase(name, pattern[3:]):
        return True
    return fnmatchcase(name, pattern)


def _text_lines(root: Path, real: Path) -> Iterator[tuple[int, str]]:
    """A text file's numbered lines; none at all for a binary or unreadable file."""
    try:
        with open_confined(root, real) as file:
            if b"\x00" in file.read(BINARY_PROBE_BYTES):
                return
            file.seek(0)
            for number, raw in enumerate(file, start=1):
                yield number, raw.decode("utf-8", errors="replace").rstrip("\r\n")
    except (OSError, ToolError):
        return  # unreadable (permissions, vanished, swapped): skipped, as grep -s does


def _clip(line: str) -> str:
    if len(line) <= MAX_GREP_LINE_CHARS:
        return line
    return f"{line[:MAX_GREP_LINE_CHARS]}… [{len(line) - MAX_GREP_LINE_CHARS} more chars]"


if __name__ == "__main__":
    json.dump(search(json.load(sys.stdin)), sys.stdout)
