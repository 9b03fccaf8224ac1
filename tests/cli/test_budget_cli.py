"""`noeta budget set/list/clear` through the real executable, on both stores: what a user
sees, and bad input (one line on stderr, non-zero exit, nothing changed)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.cli.test_limit_cli import noeta


@pytest.fixture
def store_url(store_url: str) -> str:
    """A fresh store of each kind, migrated as `noeta db migrate` does."""
    assert noeta(store_url, "db", "migrate", command="").returncode == 0
    return store_url


def budget(store_url: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    return noeta(store_url, *arguments, command="budget")


def listed(store_url: str) -> list[dict[str, object]]:
    result = budget(store_url, "list", "--json")
    assert result.returncode == 0, result.stderr
    documents: list[dict[str, object]] = json.loads(result.stdout)
    return documents


def test_set_list_and_clear_budgets(store_url: str) -> None:
    """A budget on a queue nothing names yet is set, and the user is told so."""
    result = budget(store_url, "set", "research/acme", "--per-day", "20", "--per-hour", "2.5")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "research/acme: $2.50 per hour\nresearch/acme: $20.00 per day\n"
    assert result.stderr == (
        "note: no task or queue setting names queue 'research' yet; the budget is set and "
        "applies to its tasks when they come\n"
    )
    assert budget(store_url, "set", "research", "--per-month", "400").returncode == 0
    text = budget(store_url, "list").stdout.splitlines()
    assert text[0].split() == ["budget", "period", "amount", "spent", "calls", "refused"]
    assert text[1].split() == ["research", "month", "$400.00", "$0.000000", "0", "0"]
    assert [(d["queue"], d["key"], d["period"], d["amount"]) for d in listed(store_url)] == [
        ("research", None, "month", "400.00"),
        ("research", "acme", "day", "20.00"),
        ("research", "acme", "hour", "2.50"),
    ]
    assert budget(store_url, "clear", "research/acme").stdout == "research/acme: cleared\n"
    assert [d["period"] for d in listed(store_url)] == ["month"]


BAD = [
    (["set", "q", "--per-day", "0"], "--per-day must be more than 0, not 0"),
    (["set", "q", "--per-day", "-5"], "--per-day must be more than 0, not -5"),
    (["set", "q", "--per-day", "lots"], "--per-day 'lots' is not an amount of USD"),
    (["set", "q", "--per-day", "nan"], "--per-day 'nan' is not an amount of USD"),
    (["set", "q", "--per-day", "0.001"], "--per-day 0.001 has fractions of a cent"),
    (["set", "q", "--per-week", "5"], "No such option '--per-week'"),
    (["set", "q"], "give --per-hour, --per-day or --per-month (USD)"),
    (["set", "q/", "--per-day", "5"], "bad budget 'q/': nothing after the /"),
    (["set", "q/a b", "--per-day", "5"], "bad budget 'q/a b': the concurrency key"),
    (["clear", "q"], "no budget on q to clear"),
]


@pytest.mark.parametrize("store_url", ["sqlite"], indirect=True)
def test_bad_input_is_one_line_and_changes_nothing(store_url: str) -> None:
    """A bad period, a zero, negative or non-numeric amount, a bad scope: each one line
    naming what is wrong, a non-zero exit, no budget written."""
    for arguments, said in BAD:
        result = budget(store_url, *arguments)
        assert result.returncode != 0 and "Traceback" not in result.stderr, arguments
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("noeta: error: "), result.stderr
        assert said in lines[0], lines[0]
    assert listed(store_url) == []
