"""The log lines of a service (`noeta worker`, `noeta scheduler`): one a record on stderr,
`<local time>,<ms> <LEVEL> <logger>: <message>`, as `logging.basicConfig` writes them."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

import click

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LEVELS = ("debug", "info", "warning", "error")
ENV = "NOETA_LOG_LEVEL"

F = TypeVar("F", bound=Callable[..., object])


def log_level_option(command: F) -> F:
    """`--log-level`, as Celery's `--loglevel`: `warning` drops the lines a service writes
    for every task (`claimed task …`, `task …: done`), two a job, a few per cent of a busy
    worker's CPU."""
    return click.option(
        "--log-level",
        "log_level",
        type=click.Choice(LEVELS, case_sensitive=False),
        default="info",
        show_default=True,
        envvar=ENV,
        help=f"The least severe lines written to stderr (also {ENV}).",
    )(command)


class SecondFormatter(logging.Formatter):
    """`logging.Formatter`'s lines, its time read once a second: `formatTime` converts
    and formats the record's second anew for every record (2 us), and a worker writes two
    lines a job, many a second."""

    def __init__(self, fmt: str = FORMAT) -> None:
        super().__init__(fmt)
        self._cached: tuple[int, str] = (-1, "")  # a second, and its text: one value

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        cached = self._cached
        if cached[0] != second:
            cached = (second, time.strftime(self.default_time_format, self.converter(second)))
            self._cached = cached  # one assignment: a formatter shared by threads stays right
        if self.default_msec_format is None:
            return cached[1]
        return self.default_msec_format % (cached[1], record.msecs)


def announce(log: logging.Logger, message: str, *args: object) -> None:
    """A service's start and stop lines, at `INFO` but written at every `--log-level`, as
    Celery prints its banner whatever its `--loglevel`: a worker started at `warning` still
    says who it is and when it stops. `Logger.handle` skips the level check, not the
    handlers' filters (the scrubbing)."""
    if log.isEnabledFor(logging.INFO):
        log.info(message, *args)
    else:
        log.handle(log.makeRecord(log.name, logging.INFO, "(service)", 0, message, args, None))


def configure(level: str = "info") -> None:
    """`level` (one of LEVELS) and above to stderr, unless logging was configured already
    (`basicConfig`)."""
    handler = logging.StreamHandler()
    handler.setFormatter(SecondFormatter())
    logging.basicConfig(level=level.upper(), handlers=[handler])
