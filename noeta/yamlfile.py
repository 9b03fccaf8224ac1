"""Reading the YAML files people write (scripts, the noeta config, cron files): safely.

Safe loading only (no object construction), a size limit (a few hundred bytes of nested
aliases can expand to gigabytes), and the line of every mapping kept, so that each
error can name the file, the line and the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from noeta.core.errors import ConfigError

MAX_BYTES = 1024 * 1024


class Located(dict[str, Any]):
    """A mapping from a YAML file that knows the line it started on."""

    line = 0


def load(path: str | Path, *, what: str, max_bytes: int = MAX_BYTES) -> Any:
    """Parse `path`; ConfigError ("<path>, line N: …") for anything wrong with it."""
    try:
        raw = Path(path).read_bytes()
    except OSError as error:
        raise ConfigError(f"cannot read the {what} {path}: {error.strerror}") from None
    if len(raw) > max_bytes:
        raise ConfigError(f"{path}: the {what} is over {max_bytes} bytes")
    try:
        return yaml.load(raw, Loader=_LineLoader)  # a SafeLoader subclass
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "somewhere"
        problem = getattr(error, "problem", None) or str(error)
        raise ConfigError(f"{path}, {where}: not valid YAML: {problem}") from None


def plain(value: Any) -> Any:
    """The value with every `Located` mapping turned back into a plain dict."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def line_of(value: Any) -> int:
    return getattr(value, "line", 0)


class _LineLoader(yaml.SafeLoader):
    """Safe loading that remembers the line of every mapping, for error messages."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> Located:
    pairs = loader.construct_mapping(node, deep=True)
    mapping = Located({str(key): value for key, value in pairs.items()})
    mapping.line = node.start_mark.line + 1
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
