"""A service's log lines read as `logging.basicConfig`'s format wrote them, though their
time is formatted once a second: each record's own second and milliseconds."""

from __future__ import annotations

import logging

from noeta.cli.log_lines import FORMAT, SecondFormatter


def _record(created: float) -> logging.LogRecord:
    record = logging.LogRecord("noeta.worker", logging.INFO, "", 0, "task %s: ran", ("t1",), None)
    record.created = created
    record.msecs = (created - int(created)) * 1000
    return record


def test_each_line_is_the_standard_formatters() -> None:
    standard, cached = logging.Formatter(FORMAT), SecondFormatter()
    # Within a second, across one, back to an earlier one, and across a day.
    for created in (1.7e9 + 0.001, 1.7e9 + 0.999, 1.7e9 + 1.0, 1.7e9 + 0.5, 1.7e9 + 86_400.25):
        assert cached.format(_record(created)) == standard.format(_record(created))


def test_a_time_format_given_is_used() -> None:
    record = _record(1.7e9 + 0.25)
    assert SecondFormatter().formatTime(record, "%Y") == logging.Formatter().formatTime(
        record, "%Y"
    )
