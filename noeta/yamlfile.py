"""Reading the YAML files people write (scripts, the noeta config, cron files): safely.

Safe loading only (no object construction), a size limit (a few hundred bytes of nested
aliases can expand to gigabytes), optionally no anchors or aliases at all, and the line of
every mapping and key kept, so that each error can name the file, the line and the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from noeta.core.errors import ConfigError

MAX_BYTES = 1024 * 1024


class Located(dict[str, Any]):
    """A mapping from a YAML file that knows the line it started on, the line of each key,
    and the text as written of each scalar value (to say what YAML made of `12:30` or `no`)."""

    line = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.key_lines: dict[str, int] = {}
        self.texts: dict[str, str] = {}


def load(path: str | Path, *, what: str, max_bytes: int = MAX_BYTES, aliases: bool = True) -> Any:
    """Parse `path`; ConfigError ("<path>, line N: …") for anything wrong with it.

    With `aliases=False` any anchor (&name) or alias (*name) is an error: the shared nodes
    an alias makes can expand, when walked, far beyond the size limit ("billion laughs").
    """
    try:
        raw = Path(path).read_bytes()
    except OSError as error:
        raise ConfigError(f"cannot read the {what} {path}: {error.strerror}") from None
    if len(raw) > max_bytes:
        raise ConfigError(f"{path}: the {what} is over {max_bytes} bytes")
    loader = _LineLoader if aliases else _NoAliasLoader
    try:
        return yaml.load(raw, Loader=loader)  # a SafeLoader subclass
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "somewhere"
        problem = getattr(error, "problem", None) or str(error)
        if getattr(error, "context", None) == "while scanning an alias" and mark is not None:
            problem = _unquoted_star(raw, mark.line)
        raise ConfigError(f"{path}, {where}: not valid YAML: {problem}") from None


def plain(value: Any) -> Any:
    """The value with every `Located` mapping turned back into a plain dict."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def line_of(value: Any, key: str | None = None) -> int:
    """The line of `value`'s `key` if it has one, else of `value` itself; 0 if unknown."""
    if key is not None and key in getattr(value, "key_lines", {}):
        line: int = value.key_lines[key]
        return line
    return getattr(value, "line", 0)


def _unquoted_star(raw: bytes, line: int) -> str:
    """The message for a plain value starting with `*`, which YAML takes for an alias."""
    text = raw.decode("utf-8", "replace").splitlines()[line].strip().removeprefix("- ")
    key, colon, value = text.partition(": ")
    value = value.split(" #")[0].strip()
    if not colon or not value.startswith("*"):
        return "a value that starts with * is read as an alias (*name): put it in quotes"
    return (
        f"YAML reads the * that starts {value!r} as an alias (*name): "
        f'put the value in quotes: {key}: "{value}"'
    )


class _LineLoader(yaml.SafeLoader):
    """Safe loading that remembers the line of every mapping, for error messages."""


class _NoAliasLoader(_LineLoader):
    """Safe loading that refuses anchors and aliases before anything is built from them."""

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]  # PyYAML is untyped here
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise yaml.composer.ComposerError(
                None,
                None,
                "anchors and aliases (&name, *name) are not allowed in this file",
                event.start_mark,
            )
        return super().compose_node(parent, index)


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> Located:
    pairs = loader.construct_mapping(node, deep=True)
    mapping = Located({str(key): value for key, value in pairs.items()})
    mapping.line = node.start_mark.line + 1
    for key_node, value_node in node.value:
        key = str(loader.construct_object(key_node))
        mapping.key_lines[key] = key_node.start_mark.line + 1
        if isinstance(value_node, yaml.ScalarNode):
            mapping.texts[key] = value_node.value
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
