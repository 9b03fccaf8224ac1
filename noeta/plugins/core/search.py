"""Glob and Grep: finding files and lines under the workspace, in pure Python, bounded.

Both show paths relative to the workspace, so a result can be passed straight to Read,
and both stop at a cap with a note, so one broad search cannot flood the context. Both
stop at a time limit; Grep searches in a child process (`grep_search`), since a
backtracking regex cannot be interrupted any other way.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from noeta.core.ports.payload import JSONValue
from noeta.core.ports.tool import ToolContext, ToolError, ToolFlags, ToolOutput
from noeta.plugins.core.arguments import Arguments
from noeta.plugins.core.glob_walk import TimeLimitReached, matching_entries, pattern_segments
from noeta.plugins.core.workspace import check_relative, confine, workspace_root
from noeta.plugins.tool_environment import tool_environment

MAX_GLOB_RESULTS = 500
MAX_GLOB_MATCHES = 20_000  # past this many, a pattern is too broad to be worth sorting
GLOB_TIME_LIMIT_SECONDS = 10.0
MAX_GREP_LINES = 500
MAX_GREP_FILE_BYTES = 16 * 2**20
GREP_TIME_LIMIT_SECONDS = 10.0
_NESTED = "(a+)+$"  # the classic catastrophic pattern, named in the time-limit error

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
        f"At most {MAX_GLOB_RESULTS} are shown; linked directories are not walked into."
    )
    input_schema = _GLOB_SCHEMA
    flags = ToolFlags(retry_safe=True)

    def __init__(
        self,
        max_results: int = MAX_GLOB_RESULTS,
        max_matches: int = MAX_GLOB_MATCHES,
        time_limit_seconds: float = GLOB_TIME_LIMIT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_results = max_results
        self.max_matches = max_matches
        self.time_limit_seconds = time_limit_seconds
        self.clock = clock  # read once per directory walked (tests pass their own)

    async def run(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput:
        args = Arguments(self.name, input, self.input_schema)
        pattern = args.string("pattern")
        directory = args.optional_string("path") or "."
        check_relative(pattern, "pattern")
        return await asyncio.to_thread(self._glob, ctx, pattern, directory)

    def _glob(self, ctx: ToolContext, pattern: str, directory: str) -> ToolOutput:
        root = workspace_root(ctx)
        base = _directory(root, directory)
        segments = pattern_segments(pattern)
        found: list[str] = []
        deadline = self.clock() + self.time_limit_seconds
        try:
            for candidate in matching_entries(base, segments, self.clock, deadline):
                if len(found) == self.max_matches:
                    raise ToolError(
                        f"Glob: {pattern!r} matches more than {self.max_matches:,} files; "
                        "narrow the pattern or the path"
                    )
                name = candidate.relative_to(root).as_posix()
                try:
                    real = confine(root, name)
                except ToolError:
                    continue  # a link leading outside: not part of the workspace
                if real.is_file():
                    found.append(name)
        except TimeLimitReached as reached:
            raise ToolError(
                f"Glob: {pattern!r} was still walking the workspace after "
                f"{self.time_limit_seconds:g} s ({reached.visited:,} directories visited); "
                "narrow the pattern or the path"
            ) from None
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
        f"{MAX_GREP_LINES} lines are shown; files over {MAX_GREP_FILE_BYTES // 2**20} MiB "
        f"are not searched; a search is stopped after {GREP_TIME_LIMIT_SECONDS:g} s."
    )
    input_schema = _GREP_SCHEMA
    flags = ToolFlags(retry_safe=True)

    def __init__(
        self,
        max_lines: int = MAX_GREP_LINES,
        time_limit_seconds: float = GREP_TIME_LIMIT_SECONDS,
        max_file_bytes: int = MAX_GREP_FILE_BYTES,
    ) -> None:
        self.max_lines = max_lines
        self.time_limit_seconds = time_limit_seconds
        self.max_file_bytes = max_file_bytes

    async def run(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput:
        args = Arguments(self.name, input, self.input_schema)
        pattern = args.string("pattern")
        flags = re.IGNORECASE if args.boolean("case_insensitive") else 0
        try:
            re.compile(pattern, flags)
        except re.error as error:
            raise ToolError(
                f"Grep: {pattern!r} is not a valid regular expression: {error}"
            ) from None
        root = await asyncio.to_thread(workspace_root, ctx)
        request = {
            "root": str(root),
            "where": args.optional_string("path") or ".",
            "pattern": pattern,
            "flags": flags,
            "glob": args.optional_string("glob"),
            "max_lines": self.max_lines,
            "max_file_bytes": self.max_file_bytes,
        }
        reply = await self._search_in_child(request)
        if "error" in reply:
            raise ToolError(reply["error"])
        lines: list[str] = reply["lines"]
        return ToolOutput("\n".join(lines) if lines else f"No matches for {pattern!r}")

    async def _search_in_child(self, request: dict[str, Any]) -> dict[str, Any]:
        """Run `grep_search` in a child process; kill it at the deadline or if cancelled."""
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "noeta.plugins.core.grep_search",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=_child_environment(),
        )  # fmt: skip
        try:
            out, err = await asyncio.wait_for(
                child.communicate(json.dumps(request).encode()), self.time_limit_seconds
            )
        except TimeoutError:
            raise ToolError(
                f"Grep: the search ran past its time limit of {self.time_limit_seconds:g} s "
                f"and was stopped; a pattern like {_NESTED!r} can take exponential time on a "
                "long line; simplify the pattern, or narrow the path or glob"
            ) from None
        finally:
            if child.returncode is None:
                child.kill()
                await child.wait()
        if child.returncode != 0:
            last = (err.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
            raise ToolError(f"Grep: the search failed: {last}")
        reply: dict[str, Any] = json.loads(out)
        return reply


def _child_environment() -> dict[str, str]:
    """The allowlist, plus where this process finds noeta (a source checkout, a venv)."""
    return {**tool_environment(None), "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}


def _directory(root: Path, directory: str) -> Path:
    base = confine(root, directory)
    if not base.is_dir():
        raise ToolError(f"{directory} is not a directory")
    return base
