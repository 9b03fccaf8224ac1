"""`noeta export` and `noeta replay` as the executable runs them (issue 30 item 2): an
export of logs this code wrote replays clean (exit 0); a log from a newer noeta or a
truncated export is named in one line (exit 1)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from noeta.testing.command_line import run_in_process

SCRIPT = "scripted:" + str(Path(__file__).parents[2] / "examples" / "three-steps.yaml")


def noeta(*arguments: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return run_in_process(arguments, os.environ, stdin)


def test_an_export_replays_and_a_changed_one_parts(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'noeta.db'}"
    ran = noeta("run", "List the files", "--model", SCRIPT, "--store", url, "--json")
    assert ran.returncode == 0, ran.stderr
    task_id = json.loads(ran.stdout)["id"]
    exported = noeta("export", task_id, "--store", url)
    assert exported.returncode == 0, exported.stderr
    lines = exported.stdout.splitlines()
    assert [json.loads(line)["seq"] for line in lines] == list(range(1, len(lines) + 1))
    clean = noeta("replay", "-", stdin=exported.stdout)
    assert (clean.returncode, clean.stdout.strip()) == (0, "replayed 1 log: 0 part from this noeta")
    from_the_store = noeta("replay", "--task", task_id, "--store", url)
    assert from_the_store.returncode == 0, from_the_store.stdout + from_the_store.stderr

    newer = json.loads(lines[2])
    newer["data"]["v"] = 99
    changed = "\n".join([*lines[:2], json.dumps(newer), *lines[3:]])
    parted = noeta("replay", "-", stdin=changed)
    assert parted.returncode == 1
    assert f"{task_id}: seq 3: a {newer['type']} event (encoding 99)" in parted.stdout

    truncated = noeta("replay", "-", stdin=exported.stdout[: len(lines[0]) + 40])
    assert truncated.returncode == 1
    said = truncated.stderr.strip().splitlines()
    assert len(said) == 1 and "line 2: not an event of `noeta export`" in said[0]


def test_bad_requests_are_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'noeta.db'}"
    assert noeta("db", "migrate", "--store", url).returncode == 0
    for arguments, said in {
        ("export", "--store", url): "name the tasks to export",
        ("export", "nosuch", "--store", url): "nosuch",
        ("replay", str(tmp_path / "none.jsonl")): "none.jsonl",
        ("replay", "-", "--task", "x"): "not both",
    }.items():
        failed = noeta(*arguments, stdin="")
        lines = failed.stderr.strip().splitlines()
        assert failed.returncode != 0 and len(lines) == 1 and said in lines[0], failed.stderr
