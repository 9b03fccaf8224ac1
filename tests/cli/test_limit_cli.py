"""`noeta limit set/list/clear` through the real executable, on both stores: what a user
sees, and bad input (one line on stderr, non-zero exit, nothing changed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


@pytest.fixture
def store_url(store_url: str) -> str:
    """A fresh store of each kind, migrated as `noeta db migrate` does."""
    assert noeta(store_url, "db", "migrate", command="").returncode == 0
    return store_url


def noeta(
    store_url: str, *arguments: str, command: str = "limit"
) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "NOETA_STORE"}
    return subprocess.run(
        [sys.executable, "-m", "noeta", "--store", store_url, *filter(None, [command]), *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
        check=False,
    )


def listed(store_url: str) -> list[dict[str, object]]:
    result = noeta(store_url, "list", "--json")
    assert result.returncode == 0, result.stderr
    documents: list[dict[str, object]] = json.loads(result.stdout)
    return documents


def test_set_list_and_clear_a_limit(store_url: str) -> None:
    assert noeta(store_url, "set", "anthropic/claude-x", "--rpm", "600").stdout == (
        "anthropic/claude-x: 600 rpm\n"
    )
    assert noeta(store_url, "set", "openai", "--rpm", "5", "--tpm", "40000").stdout == (
        "openai/*: 5 rpm, 40,000 tpm\n"
    )
    text = noeta(store_url, "list").stdout.splitlines()
    assert text[0].split() == [
        "limit", "rpm", "tpm", "calls", "waits", "waited", "429s", "paused", "until"
    ]  # fmt: skip
    assert text[1].split() == ["anthropic/claude-x", "600", "-", "0", "0", "0.0", "s", "0"]
    assert [(d["limit"], d["rpm"], d["tpm"]) for d in listed(store_url)] == [
        ("anthropic/claude-x", 600, None),
        ("openai/*", 5, 40000),
    ]
    assert noeta(store_url, "clear", "openai/*").stdout == "openai/*: cleared\n"
    assert [d["limit"] for d in listed(store_url)] == ["anthropic/claude-x"]


@pytest.mark.parametrize(
    ("arguments", "code", "needle"),
    [
        (["set", "anthropic", "--rpm", "0"], 1, "--rpm must be between 1 and"),
        (["set", "anthropic", "--tpm", "-5"], 1, "--tpm must be between 1 and"),
        (["set", "anthropic", "--rpm", "ten"], 2, "'ten' is not a valid integer"),
        (["set", "anthropic", "--rpm", "99999999999"], 1, "--rpm must be between 1 and"),
        (["set", "anthropic"], 1, "give --rpm, --tpm or both"),
        (["set", "nope/model", "--rpm", "3"], 1, "unknown provider 'nope'"),
        (["set", "Anthropic/x", "--rpm", "3"], 1, "the provider must be lowercase"),
        (["set", "anthropic/a b", "--rpm", "3"], 1, "the model must be * or a model name"),
        (["clear", "anthropic/never-set"], 1, "no limit anthropic/never-set to clear"),
    ],
)
def test_bad_input_is_one_line_and_changes_nothing(
    store_url: str, arguments: list[str], code: int, needle: str
) -> None:
    assert noeta(store_url, "set", "anthropic", "--rpm", "50").returncode == 0
    result = noeta(store_url, *arguments)
    assert result.returncode == code and result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("noeta: error: ") and needle in lines[0]
    assert [(d["limit"], d["rpm"], d["tpm"]) for d in listed(store_url)] == [
        ("anthropic/*", 50, None)
    ]
