"""Every relative link in the repository's Markdown resolves to a file: ADRs and
migrations are renumbered when two branches take the same number, and a link left at
the old number points at nothing (or at another decision)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def markdown_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return [ROOT / name for name in listed.stdout.split()]


def test_every_relative_link_in_the_markdown_resolves() -> None:
    files = markdown_files()
    assert len(files) > 50  # the ADRs are among them
    broken = [
        f"{path.relative_to(ROOT)}: {target}"
        for path in files
        for target in LINK.findall(path.read_text(encoding="utf-8"))
        if "://" not in target
        and not target.startswith("mailto:")
        and not (path.parent / target).exists()
    ]
    assert not broken, broken
