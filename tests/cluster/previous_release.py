"""The previous release, for the mixed-version runs: the last tag `git describe` names, a
commit the run is told, or the one `ops/previous-release` names; extracted from git into a
folder its workers run from (PYTHONPATH=<folder>, PYTHONSAFEPATH=1)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

REPOSITORY = Path(__file__).parents[2]
NAMED = REPOSITORY / "ops" / "previous-release"


class NoPreviousRelease(Exception):
    pass


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(REPOSITORY), *args], capture_output=True, check=False)


def resolve(told: str = "") -> str:
    """The previous release's full commit: `told`, else the last tag, else the named one."""
    if not told:
        tag = _git("describe", "--tags", "--abbrev=0")
        told = tag.stdout.decode().strip() if tag.returncode == 0 else ""
    if not told:
        lines = NAMED.read_text().splitlines()
        told = next((line.strip() for line in lines if line.strip()[:1] not in ("", "#")), "")
    found = _git("rev-parse", "--verify", "--quiet", f"{told}^{{commit}}")
    if not told or found.returncode != 0:
        raise NoPreviousRelease(f"the previous release {told!r} is not a commit of this repository")
    return found.stdout.decode().strip()


def extract(commit: str, into: Path) -> Path:
    """The commit's tree, written under `into` (git archive: no work tree, no .git)."""
    archive = _git("archive", "--format=tar", commit)
    if archive.returncode != 0:
        raise NoPreviousRelease(f"git archive {commit}: {archive.stderr.decode().strip()}")
    tree = into / f"noeta-{commit[:12]}"
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(tree, filter="data")
    return tree


def environment(tree: Path) -> dict[str, str]:
    """What a process of that release needs: its own noeta and examples first on the path,
    and the working folder kept off it (the current checkout would shadow the old code)."""
    return {
        "PYTHONPATH": os.pathsep.join([str(tree), str(tree / "examples")]),
        "PYTHONSAFEPATH": "1",
    }


def leaves_newer_logs_untouched(tree: Path) -> bool:
    """Whether that release leaves a log it cannot read before any hook or pin writes to
    it (ADR-0097, which it then ships): an earlier one appends its on_event hook's record."""
    return any((tree / "docs" / "adr").glob("*-the-event-format-changes-*"))


def unknown_to(tree: Path, logged: list[tuple[str, object]]) -> list[bool]:
    """For each (type, data), whether that release's own decode calls it a newer noeta's."""
    side = Path(__file__).with_name("previous_side.py")
    env = {**os.environ, **environment(tree)}
    asked = subprocess.run(
        [sys.executable, str(side), "--unknown"], input=json.dumps(logged), env=env,
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if asked.returncode != 0:
        raise NoPreviousRelease(f"the previous release's decode: {asked.stderr.strip()[-300:]}")
    answer: list[bool] = json.loads(asked.stdout)
    return answer
