"""`noeta submit --max-cost --max-tokens --on-budget`: stored in the task's TaskCreated
(a version an older noeta leaves alone), each bad value one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from noeta.core.rules.events import BUDGET_VERSION
from tests.cli.test_run import EXAMPLE, noeta, one_line_error


@pytest.fixture
def sqlite_store(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'noeta.db'}"


def test_submit_stores_the_budget_in_the_task(sqlite_store: str) -> None:
    budget = ("--max-cost", "0.50", "--max-tokens", "200000", "--on-budget", "ask")
    model = ("--model", f"scripted:{EXAMPLE}", "--id", "b1")
    result = noeta("submit", "go", *model, *budget, store=sqlite_store)
    assert result.returncode == 0, result.stderr
    shown = noeta("show", "b1", "--json", store=sqlite_store)
    [created] = json.loads(shown.stdout)["log"]
    data = created["data"]
    assert data["v"] == BUDGET_VERSION
    assert (data["budget_cost"], data["budget_tokens"], data["on_budget"]) == (
        "0.50",
        200000,
        "ask",
    )


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("--max-cost", "0", "'0' is not more than 0"),
        ("--max-cost", "-1", "'-1' is not more than 0"),
        ("--max-cost", "abc", "'abc' is not a number of US dollars"),
        ("--max-cost", "nan", "'nan' is not more than 0"),
        ("--max-tokens", "0", "0 is not in the range x>=1"),
        ("--on-budget", "bogus", "'bogus' is not one of 'fail', 'ask'"),
    ],
)
def test_a_bad_budget_is_one_line_and_exit_2(
    sqlite_store: str, option: str, value: str, said: str
) -> None:
    result = noeta("submit", "go", option, value, store=sqlite_store)
    line = one_line_error(result, 2)
    assert option in line and said in line, line
