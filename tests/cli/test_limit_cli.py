"""`noeta limit set/list/clear` through the real executable, on both stores: what a user
sees, and bad input (one line on stderr, non-zero exit, nothing changed)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from noeta.testing.command_line import run_in_process


@pytest.fixture
def store_url(store_url: str) -> str:
    """A fresh store of each kind, migrated as `noeta db migrate` does."""
    assert noeta(store_url, "db", "migrate", command="").returncode == 0
    return store_url


def noeta(
    store_url: str, *arguments: str, command: str = "limit"
) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "NOETA_STORE": store_url}  # not --store: it holds a password
    return run_in_process([*filter(None, [command]), *arguments], environment)


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


async def take_the_budget(store_url: str) -> None:
    """One call under `scripted/*`, made here: the next one must wait its slot."""
    from noeta.backends.stores import open_store
    from noeta.core.ports.model_limits import ModelBudget, ModelLimiter
    from noeta.core.ports.store import NewEvent, NewTask

    store = await open_store(store_url)
    try:
        await store.create_task(NewTask("other", [NewEvent("created", {})]))
        claim = await store.claim_task("elsewhere", "other", 30)
        assert claim is not None and isinstance(store, ModelLimiter)
        called = [NewEvent("ModelCalled", {})]
        await store.append_model_called(claim, 1, called, ModelBudget(("scripted/*",), 1))
    finally:
        await store.close()


async def test_noeta_run_waits_for_the_budget_and_finishes(store_url: str) -> None:
    import asyncio

    example = Path(__file__).parents[2] / "examples" / "hello.yaml"
    assert noeta(store_url, "set", "scripted", "--rpm", "12").returncode == 0  # one per 5 s
    await take_the_budget(store_url)
    run = ["run", "What does noeta guarantee?", "--model", f"scripted:{example}", "--id", "r"]
    result = await asyncio.to_thread(noeta, store_url, *run, command="")
    assert result.returncode == 0, result.stderr
    assert "exactly one writer" in result.stdout
    [limit] = listed(store_url)
    assert (limit["calls"], limit["handbacks"]) == (2, 1)  # hello.yaml: one call
    assert limit["waited_seconds"] > 0  # type: ignore[operator]
    assert (await log_types(store_url, "r")).count("ModelCalled") == 1  # none for the wait


async def log_types(store_url: str, task_id: str) -> list[str]:
    from noeta.backends.stores import open_store

    store = await open_store(store_url)
    try:
        return [event.type for event in await store.read_log(task_id)]
    finally:
        await store.close()
