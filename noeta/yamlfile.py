"""Reading the YAML files people write (the noeta config, model scripts, cron files): the
one loader for all of them, so each is refused the same things with the same words.

Safe loading only (no object construction); no anchors or aliases (a few hundred bytes of
nested aliases expand to gigabytes); no key given twice (YAML would keep the last one
silently); a size limit; UTF-8 only. Every error names the file, the line and, where YAML
knows it, the column; every mapping and list keeps the line of each key and item.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from noeta.core.errors import ConfigError

MAX_BYTES = 1024 * 1024


class Located(dict[str, Any]):
    """A mapping from a YAML file that knows the line it started on, the line of each key,
    and the text as written of each scalar value (to say what YAML made of `12:30` or `no`)."""

    line = 1

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.key_lines: dict[str, int] = {}
        self.texts: dict[str, str] = {}


class LocatedList(list[Any]):
    """A list from a YAML file that knows the line it started on and the line of each item
    (an item that is not a mapping, `- 42`, has no line of its own)."""

    line = 1

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.item_lines: list[int] = []


def load(
    path: str | Path, *, what: str, max_bytes: int = MAX_BYTES, follow_links: bool = True
) -> Any:
    """Parse `path`; ConfigError ("<path>, line N, column M: …") for anything wrong with it.
    `follow_links=False` for a file a task could have named or made (a symlink is refused)."""
    raw = read_regular_file(path, what=what, max_bytes=max_bytes, follow_links=follow_links)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        column = error.start - (raw.rfind(b"\n", 0, error.start) + 1) + 1
        raise ConfigError(
            f"{path}, line {line}, column {column}: the {what} is not UTF-8 text "
            f"(byte 0x{raw[error.start]:02x} at offset {error.start})"
        ) from None
    try:
        return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as error:
        raise ConfigError(f"{path}, {_where(error, text)}: {_problem(error, text)}") from None
    except yaml.reader.ReaderError as error:  # a control character, e.g. a binary file
        line = text.count("\n", 0, error.position) + 1
        raise ConfigError(
            f"{path}, line {line}: the {what} holds the character #x{error.character:04x}, "
            "which YAML does not allow; is it a text file?"
        ) from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML: {error}") from None
    except RecursionError:
        raise ConfigError(f"{path}: the {what} nests lists or mappings too deeply") from None


def read_regular_file(
    path: str | Path, *, what: str, max_bytes: int, follow_links: bool = True
) -> bytes:
    """The bytes of `path`, a regular file of at most `max_bytes`. Opened without blocking
    (a FIFO or a device would wait for ever) and checked before a byte is read."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    try:
        descriptor = os.open(path, flags)
    except OSError as error:
        if error.errno == errno.ELOOP and not follow_links:
            raise ConfigError(f"cannot read the {what} {path}: it is a symbolic link") from None
        raise ConfigError(f"cannot read the {what} {path}: {error.strerror}") from None
    with os.fdopen(descriptor, "rb") as file:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise ConfigError(f"cannot read the {what} {path}: it is not a regular file")
        if status.st_size > max_bytes:
            raise ConfigError(
                f"{path}: the {what} is over {max_bytes} bytes; is it the right file?"
            )
        raw = file.read(max_bytes + 1)
    if len(raw) > max_bytes:  # it grew since
        raise ConfigError(f"{path}: the {what} is over {max_bytes} bytes; is it the right file?")
    return raw


def plain(value: Any) -> Any:
    """The value with every `Located` mapping and list turned back into a plain one."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def line_of(value: Any, key: str | int | None = None) -> int:
    """The line of a mapping's `key`, or of a list's item number `key`, if known; else the
    line `value` starts on; 1 for a value with no line (the top of the file)."""
    if isinstance(key, str) and key in getattr(value, "key_lines", {}):
        line: int = value.key_lines[key]
        return line
    if isinstance(key, int) and 0 <= key < len(getattr(value, "item_lines", ())):
        item_line: int = value.item_lines[key]
        return item_line
    return getattr(value, "line", 1)


def _where(error: yaml.MarkedYAMLError, text: str) -> str:
    mark = error.problem_mark or error.context_mark
    if mark is None:
        return "line 1"
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _problem(error: yaml.MarkedYAMLError, text: str) -> str:
    problem = error.problem or str(error)
    if error.context == "while scanning an alias" and error.problem_mark is not None:
        problem = _unquoted_star(text, error.problem_mark.line)
    if isinstance(error, _Refused):
        return problem
    return f"not valid YAML: {problem}"


def _unquoted_star(text: str, line: int) -> str:
    """The message for a plain value starting with `*`, which YAML takes for an alias."""
    written = text.splitlines()[line].strip().removeprefix("- ")
    key, colon, value = written.partition(": ")
    value = value.split(" #")[0].strip()
    if not colon or not value.startswith("*"):
        return "a value that starts with * is read as an alias (*name): put it in quotes"
    return (
        f"YAML reads the * that starts {value!r} as an alias (*name): "
        f'put the value in quotes: {key}: "{value}"'
    )


class _Refused(yaml.MarkedYAMLError):
    """Valid YAML that noeta's files do not allow (an alias, a key given twice)."""


class _Loader(yaml.SafeLoader):
    """Safe loading that refuses anchors and aliases before anything is built from them,
    and remembers the line of every mapping, key and list item."""

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]  # PyYAML is untyped here
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _Refused(
                None,
                None,
                "anchors and aliases (&name, *name) are not allowed; write the value out",
                event.start_mark,
            )
        return super().compose_node(parent, index)


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> Located:
    loader.flatten_mapping(node)  # merge keys (<<): aliases, refused
    mapping = Located()
    mapping.line = node.start_mark.line + 1
    for key_node, value_node in node.value:
        key = str(loader.construct_object(key_node, deep=True))
        line = key_node.start_mark.line + 1
        if key in mapping.key_lines:
            raise _Refused(
                None,
                None,
                f"the key {key!r} is given twice (first on line {mapping.key_lines[key]}); "
                "keep one",
                key_node.start_mark,
            )
        mapping[key] = loader.construct_object(value_node, deep=True)
        mapping.key_lines[key] = line
        if isinstance(value_node, yaml.ScalarNode):
            mapping.texts[key] = value_node.value
    return mapping


def _construct_list(loader: _Loader, node: yaml.SequenceNode) -> LocatedList:
    items = LocatedList(loader.construct_object(item, deep=True) for item in node.value)
    items.line = node.start_mark.line + 1
    items.item_lines = [item.start_mark.line + 1 for item in node.value]
    return items


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_list)
