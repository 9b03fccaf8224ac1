"""Running `noeta` in tests as the docs recommend: the store URL, whose password would be
readable by every local process on the command line, goes in NOETA_STORE instead."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def store_in_environment(
    arguments: Sequence[str], environment: Mapping[str, str]
) -> tuple[list[str], dict[str, str]]:
    """`arguments` without their `--store URL` pair, and `environment` with NOETA_STORE=URL."""
    given, moved = list(arguments), dict(environment)
    while "--store" in given:
        at = given.index("--store")
        moved["NOETA_STORE"] = given[at + 1]
        del given[at : at + 2]
    return given, moved
