"""Decorated functions the canvas tests compose and a real worker runs. Each writes a
line to the ledger file named by $NOETA_TEST_LEDGER, so a test counts what ran."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import noeta


def record(line: str) -> None:
    with Path(os.environ["NOETA_TEST_LEDGER"]).open("a") as file:
        file.write(line + "\n")


@noeta.tool(retry_safe=True)
def add(x: int, y: int) -> int:
    record(f"add {x} {y}")
    return x + y


@noeta.tool(retry_safe=True)
def mul(x: int, y: int) -> int:
    record(f"mul {x} {y}")
    return x * y


@noeta.tool
def tsum(numbers: list[int]) -> int:
    """A chord's callback: not retry-safe, so a second run would show in the ledger."""
    record(f"tsum {numbers}")
    return sum(numbers)


@noeta.tool
def boom(x: Any = None) -> int:
    record(f"boom {x}")
    raise ValueError(f"boom on {x!r}")


@noeta.tool
def noop(x: Any = None) -> None:
    """The benchmark's member: does nothing."""
