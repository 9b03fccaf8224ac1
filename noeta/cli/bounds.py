"""The ranges the command line accepts for durations and counts, checked as the options
are read, so that `--lease 1e9` or `--poll nan` is one clear line before anything starts.

A lease is at least 1 s (renewed every third of it, one statement per worker: shorter
would be most of the database's work) and at most 1 h (a killed worker's task waits out
the lease before another takes it over). The store itself accepts any positive lease.
"""

from __future__ import annotations

import math
from typing import Any

import click

LEASE_MIN_SECONDS, LEASE_MAX_SECONDS = 1.0, 3600.0
POLL_MIN_SECONDS, POLL_MAX_SECONDS = 0.05, 300.0
GRACE_MIN_SECONDS, GRACE_MAX_SECONDS = 0.0, 86400.0  # a day: a long job may be let finish
UNRUNNABLE_MAX_SECONDS = 7 * 86400.0  # a week: longer is "never", the default
CONCURRENCY_MAX = 1000


class Seconds(click.ParamType[float]):
    """A finite number of seconds within [low, high]; NaN and infinity are refused."""

    name = "seconds"

    def __init__(self, low: float, high: float, what: str) -> None:
        self.low, self.high, self.what = low, high, what

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str:
        return f"SECONDS [{self.low:g}-{self.high:g}]"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, float | int):
            seconds = float(value)
        else:
            try:
                seconds = float(value)
            except ValueError:
                self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(seconds) or not self.low <= seconds <= self.high:
            self.fail(
                f"{self.what} must be between {self.low:g} and {self.high:g} seconds, not {value}",
                param,
                ctx,
            )
        return seconds


LEASE = Seconds(LEASE_MIN_SECONDS, LEASE_MAX_SECONDS, "a lease")
POLL = Seconds(POLL_MIN_SECONDS, POLL_MAX_SECONDS, "the poll interval")
GRACE = Seconds(GRACE_MIN_SECONDS, GRACE_MAX_SECONDS, "the grace")
UNRUNNABLE_AFTER = Seconds(0.0, UNRUNNABLE_MAX_SECONDS, "--unrunnable-after")
CONCURRENCY = click.IntRange(1, CONCURRENCY_MAX)
# A worker's pool (ADR-0139): its group commit's rounds (ROUNDS_IN_FLIGHT, 2) and one for
# everything else at least; by default concurrency + 2, never more than 6.
CONNECTIONS_MIN = 3
CONNECTIONS_DEFAULT = 6
CONNECTIONS_MAX = CONCURRENCY_MAX + 2  # what the largest worker held before ADR-0139


class Connections(click.ParamType[int]):
    """A worker's pool size: a whole number from what it needs to what it could use."""

    name = "connections"

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str:
        return f"N [{CONNECTIONS_MIN}-{CONNECTIONS_MAX}]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            number = int(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a whole number of connections", param, ctx)
        if number < CONNECTIONS_MIN:
            self.fail(
                f"a worker needs at least {CONNECTIONS_MIN} connections (two for its group"
                f" commit's rounds, one for its runs' reads), not {value}",
                param,
                ctx,
            )
        if number > CONNECTIONS_MAX:
            self.fail(f"at most {CONNECTIONS_MAX} connections, not {value}", param, ctx)
        return number


CONNECTIONS = Connections()
