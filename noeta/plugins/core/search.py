"""Glob and Grep: finding files and lines under the workspace, in pure Python.

Both show paths relative to the workspace, so a result can be passed straight to Read,
and both stop at a cap with a note, so one broad search cannot flood the context.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from fnmatch import fnmatchcase
from pathlib import Path

from noeta.core.payload import JSONValue
from noeta.core.tool import ToolContext, ToolError, ToolFlags, ToolOutput
from noeta.plugins.core.arguments import Arguments
from noeta.plugins.core.files import BINARY_PROBE_BYTES
from noeta.plugins.core.workspace import (
    check_relative,
    confine,
    relative_name,
    walk_files,
    workspace_root,
)

MAX_GLOB_RESULTS = 500
MAX_GREP_LINES = 500
MAX_GREP_LINE_CHARS = 400
# A repository's object store is compressed binary and never what a search is after.
SKIPPED_DIRECTORIES = frozenset({".git"})

_DIRECTORY: dict[str, JSONValue] = {
    "type": "string",
    "description": "Directory to search in, relative to the workspace. Default: all of it.",
}

_GLOB_SCHEMA: dict[str, JSONValue] = {
    "type": "object",
    "properties": {
        "pattern": {
            "type": "string",
            "description": "Glob such as '**/*.py' ('*.py' matches in the directory only).",
        },
        "path": _DIRECTORY,
    },
    "required": ["pattern"],
    "additionalProperties": False,
}

_GREP_SCHEMA: dict[str, JSONValue] = {
    "type": "object",
    "properties": {
        "pattern": {"type": "string", "description": "Python regular expression."},
        "path": {
            "type": "string",
            "description": "File or directory to search, relative to the workspace. Default: all.",
        },
        "glob": {
            "type": "string",
            "description": "Only files matching this glob: '*.py' matches file names, "
            "'src/*.py' paths relative to the workspace.",
        },
        "case_insensitive": {"type": "boolean", "description": "Ignore case. Default false."},
    },
    "required": ["pattern"],
    "additionalProperties": False,
}


class Glob:
    name = "Glob"
    description = (
        "List the files in the workspace that match a glob pattern, sorted by path. "
        f"At most {MAX_GLOB_RESULTS} are shown."
    )
    input_schema = _GLOB_SCHEMA
    flags = ToolFlags(retry_safe=True)

    def __init__(self, max_results: int = MAX_GLOB_RESULTS) -> None:
        self.max_results = max_results

    async def run(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput:
        args = Arguments(self.name, input, self.input_schema)
        pattern = args.string("pattern")
        directory = args.optional_string("path") or "."
        check_relative(pattern, "pattern")
        return await asyncio.to_thread(self._glob, ctx, pattern, directory)

    def _glob(self, ctx: ToolContext, pattern: str, directory: str) -> ToolOutput:
        root = workspace_root(ctx)
        base = _directory(root, directory)
        found: list[str] = []
        try:
            for candidate in base.glob(pattern):
                name = candidate.relative_to(root).as_posix()
                try:
                    real = confine(root, name)
                except ToolError:
                    continue  # a link leading outside: not part of the workspace
                if real.is_file():
                    found.append(name)
        except (ValueError, NotImplementedError) as error:
            raise ToolError(f"Glob: the pattern {pattern!r} is not usable: {error}") from error
        if not found:
            return ToolOutput(f"No files match {pattern!r}")
        found.sort()
        shown = found[: self.max_results]
        if len(found) > len(shown):
            shown.append(
                f"[{len(found) - len(shown)} more of {len(found)} files not shown; "
                "narrow the pattern or the path]"
            )
        return ToolOutput("\n".join(shown))


class Grep:
    name = "Grep"
    description = (
        "Search the workspace's text files for a regular expression. Each matching line "
        "comes as 'path:line:text'. Binary files and .git are skipped; at most "
        f"{MAX_GREP_LINES} lines are shown."
    )
    input_schema = _GREP_SCHEMA
    flags = ToolFlags(retry_safe=True)

    def __init__(self, max_lines: int = MAX_GREP_LINES) -> None:
        self.max_lines = max_lines

    async def run(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput:
        args = Arguments(self.name, input, self.input_schema)
        pattern = args.string("pattern")
        where = args.optional_string("path") or "."
        name_glob = args.optional_string("glob")
        flags = re.IGNORECASE if args.boolean("case_insensitive") else 0
        try:
            regex = re.compile(pattern, flags)
        except re.error as error:
            raise ToolError(
                f"Grep: {pattern!r} is not a valid regular expression: {error}"
            ) from None
        return await asyncio.to_thread(self._grep, ctx, regex, where, name_glob)

    def _grep(
        self, ctx: ToolContext, regex: re.Pattern[str], where: str, name_glob: str | None
    ) -> ToolOutput:
        root = workspace_root(ctx)
        start = confine(root, where)
        if not start.exists():
            raise ToolError(f"Grep: {where} does not exist")
        found: list[str] = []
        for real in walk_files(root, start, SKIPPED_DIRECTORIES):
            name = relative_name(root, real)
            if name_glob is not None and not _glob_matches(name, name_glob):
                continue
            for number, line in _text_lines(real):
                if not regex.search(line):
                    continue
                if len(found) == self.max_lines:
                    found.append(
                        f"[stopped after {self.max_lines} matching lines; "
                        "narrow the pattern, path or glob]"
                    )
                    return ToolOutput("\n".join(found))
                found.append(f"{name}:{number}:{_clip(line)}")
        if not found:
            return ToolOutput(f"No matches for {regex.pattern!r}")
        return ToolOutput("\n".join(found))


def _directory(root: Path, directory: str) -> Path:
    base = confine(root, directory)
    if not base.is_dir():
        raise ToolError(f"{directory} is not a directory")
    return base


def _glob_matches(name: str, pattern: str) -> bool:
    """Like ripgrep's -g: a pattern without '/' is matched against the file name only."""
    if "/" not in pattern:
        return fnmatchcase(name.rsplit("/", 1)[-1], pattern)
    # '**/' may stand for no directory at all, as it does in Glob.
    if pattern.startswith("**/") and fnmatchcase(name, pattern[3:]):
        return True
    return fnmatchcase(name, pattern)


def _text_lines(real: Path) -> Iterator[tuple[int, str]]:
    """A text file's numbered lines; none at all for a binary or unreadable file."""
    try:
        with real.open("rb") as probe:
            if b"\x00" in probe.read(BINARY_PROBE_BYTES):
                return
        with real.open(encoding="utf-8", errors="replace") as file:
            for number, line in enumerate(file, start=1):
                yield number, line.rstrip("\r\n")
    except OSError:
        return  # unreadable (permissions, vanished): a search skips it, as grep -s does


def _clip(line: str) -> str:
    if len(line) <= MAX_GREP_LINE_CHARS:
        return line
    return f"{line[:MAX_GREP_LINE_CHARS]}… [{len(line) - MAX_GREP_LINE_CHARS} more chars]"
