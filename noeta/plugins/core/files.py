"""Read, Write and Edit: the file tools, each confined to the task's workspace.

Disk work runs in a thread so a large file never stalls the worker's event loop (and its
lease renewal), and holds a bounded part of any file: Read goes through it in chunks,
Edit refuses a file over MAX_EDIT_BYTES.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from noeta.core.ports.payload import JSONValue
from noeta.core.ports.tool import ToolContext, ToolError, ToolFlags, ToolOutput
from noeta.plugins.core.arguments import Arguments
from noeta.plugins.core.workspace import confine, open_confined, workspace_root

MAX_READ_CHARS = 256 * 1024
# A line's bytes kept at most (the rest of it is read past, never held): one line can
# fill a call's output, not more.
MAX_LINE_BYTES = MAX_READ_CHARS
# What one Read goes through to reach its offset: past it, the call stops and says so.
MAX_SCAN_BYTES = 256 * 2**20
READ_CHUNK_BYTES = 64 * 1024
# Edit holds the file (and its new text) whole; larger files are for Bash's tools.
MAX_EDIT_BYTES = 16 * 2**20
BINARY_PROBE_BYTES = 8192  # as git and grep do: a NUL in the first block means binary

_PATH: dict[str, JSONValue] = {
    "type": "string",
    "description": "Path of the file, relative to the workspace (e.g. 'src/app.py').",
}

_READ_SCHEMA: dict[str, JSONValue] = {
    "type": "object",
    "properties": {
        "file_path": _PATH,
        "offset": {
            "type": "integer",
            "minimum": 1,
            "description": "Line number to start at (1 is the first line). Default 1.",
        },
        "limit": {
            "type": "integer",
            "minimum": 1,
            "description": "How many lines to show at most. Default: to the end.",
        },
    },
    "required": ["file_path"],
    "additionalProperties": False,
}

_WRITE_SCHEMA: dict[str, JSONValue] = {
    "type": "object",
    "properties": {
        "file_path": _PATH,
        "content": {"type": "string", "description": "The file's complete new content."},
    },
    "required": ["file_path", "content"],
    "additionalProperties": False,
}

_EDIT_SCHEMA: dict[str, JSONValue] = {
    "type": "object",
    "properties": {
        "file_path": _PATH,
        "old_string": {
            "type": "string",
            "description": "Exact text to replace, whitespace included (without line numbers).",
        },
        "new_string": {"type": "string", "description": "The text to put in its place."},
        "replace_all": {
            "type": "boolean",
            "description": "Replace every occurrence. Default false: it must occur exactly once.",
        },
    },
    "required": ["file_path", "old_string", "new_string"],
    "additionalProperties": False,
}


class Read:
    name = "Read"
    description = (
        "Read a text file in the workspace. Lines come numbered ('     7\\tcode'); the numbers "
        "are not part of the file. Use offset and limit to read a long file in parts. "
        f"Output is cut at {MAX_READ_CHARS // 1024} KiB, with a note saying where to go on."
    )
    input_schema = _READ_SCHEMA
    flags = ToolFlags(retry_safe=True)

    async def run(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput:
        args = Arguments(self.name, input, self.input_schema)
        path = args.string("file_path")
        offset = args.integer("offset", 1, minimum=1)
        limit = args.optional_integer("limit", minimum=1)
        return await asyncio.to_thread(_read, ctx, path, offset, limit)


def _read(ctx: ToolContext, path: str, offset: int, limit: int | None) -> ToolOutput:
    root, real = _existing_file(ctx, path)
    try:
        with open_confined(root, real) as binary:
            if b"\x00" in binary.read(BINARY_PROBE_BYTES):
                raise ToolError(f"{path} looks binary (it holds NUL bytes); Read shows text only")
            binary.seek(0)
            return ToolOutput(_numbered(path, _bounded_lines(binary), offset, limit))
    except OSError as error:
        raise ToolError(f"cannot read {path}: {error.strerror or error}") from error


class _ScanLimitReached(Exception):
    """A Read went through MAX_SCAN_BYTES of the file before it was done."""

    def __init__(self, line: int) -> None:
        self.line = line


def _bounded_lines(file: BinaryIO) -> Iterator[tuple[str, bool]]:
    """Each line's text (without its line end) and whether it was cut at MAX_LINE_BYTES;
    the file is read in chunks, so no line is ever held whole. A cut line is given as
    soon as it is cut: its end is looked for only if the reader asks for the next one."""
    kept = bytearray()
    given = False  # the current line was given, cut, before its end was found
    scanned = 0
    lines = 0
    while chunk := file.read(READ_CHUNK_BYTES):
        scanned += len(chunk)
        if scanned > MAX_SCAN_BYTES:
            raise _ScanLimitReached(lines + 1)
        start = 0
        while start <= len(chunk):
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end == -1 else chunk[start:end]
            if not given:
                room = MAX_LINE_BYTES - len(kept)
                kept += piece[:room]
                if len(piece) > room:
                    given = True
                    yield _text(kept), True
            if end == -1:
                break
            if not given:
                yield _text(kept), False
            lines += 1
            kept, given, start = bytearray(), False, end + 1
    if kept and not given:
        yield _text(kept), False


def _text(line: bytes | bytearray) -> str:
    # A NUL past the binary probe would not survive the log (PostgreSQL text refuses it).
    text = line.removesuffix(b"\r").decode("utf-8", errors="replace")
    return text.replace("\x00", "\\x00")


def _numbered(path: str, lines: Iterable[tuple[str, bool]], offset: int, limit: int | None) -> str:
    shown: list[str] = []
    size = 0
    number = 0
    try:
        for number, (text, cut) in enumerate(lines, start=1):
            if number < offset:
                continue
            if limit is not None and number >= offset + limit:
                shown.append(f"[stopped after {limit} lines; more follow from offset={number}]")
                return "\n".join(shown)
            rendered = f"{number:>6}\t{text}"
            if cut or size + len(rendered) + 1 > MAX_READ_CHARS:
                if not shown:  # one line larger than the whole cap: show its start
                    shown.append(rendered[:MAX_READ_CHARS])
                    shown.append(
                        f"[line {number} cut at {MAX_READ_CHARS:,} characters; "
                        f"read on with offset={number + 1}]"
                    )
                else:
                    shown.append(
                        f"[output cut at {MAX_READ_CHARS // 1024} KiB; read on with "
                        f"offset={number}]"
                    )
                return "\n".join(shown)
            shown.append(rendered)
            size += len(rendered) + 1
    except _ScanLimitReached as reached:
        line = max(reached.line, offset)
        shown.append(
            f"[stopped: Read goes through at most {MAX_SCAN_BYTES:,} bytes of a file, and "
            f"lines from {reached.line:,} on lie beyond; use Bash for them "
            f"(e.g. sed -n '{line},+99p' {path})]"
        )
        return "\n".join(shown)
    if number == 0:
        return f"({path} is empty)"
    if not shown:
        return f"({path} has {number} lines; offset={offset} is past the end)"
    return "\n".join(shown)


class Write:
    name = "Write"
    description = (
        "Write a file in the workspace, replacing it if it exists; missing parent "
        "directories are created. Give the complete content. To change part of a file, "
        "use Edit."
    )
    input_schema = _WRITE_SCHEMA
    flags = ToolFlags(retry_safe=False)  # a re-run would undo anything written since

    async def run(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput:
        args = Arguments(self.name, input, self.input_schema)
        path = args.string("file_path")
        content = args.string("content")
        return await asyncio.to_thread(_write, ctx, path, content)


def _write(ctx: ToolContext, path: str, content: str) -> ToolOutput:
    root = workspace_root(ctx)
    real = confine(root, path)
    if real.is_dir():
        raise ToolError(f"{path} is a directory")
    existed = real.exists()
    try:
        _store_text(root, real, content)
    except OSError as error:
        raise ToolError(f"cannot write {path}: {error.strerror or error}") from error
    verb = "Overwrote" if existed else "Created"
    lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
    return ToolOutput(f"{verb} {path} ({_count(lines, 'line')}, {_count(len(content), 'char')})")


class Edit:
    name = "Edit"
    description = (
        "Replace exact text in a workspace file: old_string must occur exactly once "
        "(add surrounding lines to make it unique) unless replace_all is true. Copy "
        "old_string from Read's output without the line-number prefix."
    )
    input_schema = _EDIT_SCHEMA
    flags = ToolFlags(retry_safe=False)  # after success, a re-run finds nothing to replace

    async def run(self, input: dict[str, JSONValue], ctx: ToolContext) -> ToolOutput:
        args = Arguments(self.name, input, self.input_schema)
        path = args.string("file_path")
        old = args.string("old_string")
        new = args.string("new_string")
        replace_all = args.boolean("replace_all")
        if not old:
            raise ToolError("Edit: old_string is empty; to create a file, use Write")
        if old == new:
            raise ToolError("Edit: old_string and new_string are the same; nothing to change")
        return await asyncio.to_thread(_edit, ctx, path, old, new, replace_all)


def _edit(ctx: ToolContext, path: str, old: str, new: str, replace_all: bool) -> ToolOutput:
    root, real = _existing_file(ctx, path)
    try:
        with open_confined(root, real) as file:
            size = os.fstat(file.fileno()).st_size
            data = file.read(MAX_EDIT_BYTES + 1)  # + 1: a file that grew since is seen
        if max(size, len(data)) > MAX_EDIT_BYTES:
            raise ToolError(
                f"{path} is {max(size, len(data)):,} bytes; Edit changes files up to "
                f"{MAX_EDIT_BYTES:,} bytes; change a larger one with Bash (sed, a script)"
            )
        # surrogateescape: bytes that are not UTF-8 survive the edit unchanged.
        text = data.decode("utf-8", errors="surrogateescape")
    except OSError as error:
        raise ToolError(f"cannot read {path}: {error.strerror or error}") from error
    count = text.count(old)
    if count == 0:
        raise ToolError(
            f"old_string was not found in {path}; Read the file and copy the text exactly, "
            "whitespace and indentation included"
        )
    if count > 1 and not replace_all:
        raise ToolError(
            f"old_string occurs {count} times in {path}; include more surrounding text to "
            "make it unique, or set replace_all to true"
        )
    try:
        _store_text(root, real, text.replace(old, new))
    except OSError as error:
        raise ToolError(f"cannot write {path}: {error.strerror or error}") from error
    return ToolOutput(f"Replaced {_count(count, 'occurrence')} in {path}")


def _existing_file(ctx: ToolContext, path: str) -> tuple[Path, Path]:
    """The workspace and the confined real path of a file that exists."""
    root = workspace_root(ctx)
    real = confine(root, path)
    if not real.exists():
        raise ToolError(f"{path} does not exist")
    if real.is_dir():
        raise ToolError(f"{path} is a directory; use Glob to list its files")
    return root, real


def _store_text(root: Path, real: Path, text: str) -> None:
    try:
        encoded = text.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError as error:
        raise ToolError(f"the content cannot be written as UTF-8: {error.reason}") from error
    writing = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    with open_confined(root, real, writing, make_parents=True) as file:
        file.write(encoded)


def _count(number: int, noun: str) -> str:
    return f"{number:,} {noun}" if number == 1 else f"{number:,} {noun}s"
