"""Store URLs whose password holds an unescaped '@', through the real `noeta`: one line
that says to escape it as %40, and no fragment of the password anywhere (issue 25, item 24)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

NOETA = str(Path(sys.executable).parent / "noeta")

# (the password, the URL around it); every fragment between '@' and '/' is secret.
AT_SIGNS = [
    ("hunt@er42x", "postgresql://u:{}@127.0.0.1:1/db"),
    ("hunt@er42x@wolf7q", "postgresql://u:{}@127.0.0.1:1/db"),
    ("@hunter42x", "postgresql://u:{}@127.0.0.1:1/db"),
    ("hunter42x@", "postgresql://u:{}@127.0.0.1:1/db"),
    ("hunt/er42x@wolf7q", "postgresql://u:{}@127.0.0.1:1/db"),
    ("hunt@er42x", "postgres://u:{}@[::1]:1/db?sslmode=disable"),
    ("hunt@er42x", "postgresql://u:{}@127.0.0.1:1,127.0.0.2:2/db"),
]


def fragments(password: str) -> list[str]:
    return [part for part in password.replace("/", "@").split("@") if part]


@pytest.mark.parametrize(("password", "shape"), AT_SIGNS)
def test_an_unescaped_at_in_a_password_says_escape_it_and_shows_none_of_it(
    tmp_path: Path, password: str, shape: str
) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("NOETA_", "PG"))}
    environment["NOETA_STORE"] = shape.format(password)
    environment["NOETA_HOME"] = str(tmp_path / "home")
    result = subprocess.run(
        [NOETA, "tasks"],
        capture_output=True,
        text=True,
        timeout=60,
        env=environment,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1, result.stderr
    assert len(lines) == 1 and lines[0].startswith("noeta: error: "), result.stderr
    assert "escape @ in the password as %40" in lines[0]
    for fragment in fragments(password):
        assert fragment not in result.stdout + result.stderr


def test_a_slash_in_a_password_shows_no_piece_of_it_as_a_port(tmp_path: Path) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("NOETA_", "PG"))}
    environment["NOETA_STORE"] = "postgresql://u:hunt/er42x@127.0.0.1:1/db"
    environment["NOETA_HOME"] = str(tmp_path / "home")
    result = subprocess.run(
        [NOETA, "tasks"], capture_output=True, text=True, timeout=60, env=environment, check=False
    )
    assert result.returncode == 1 and "is written %2F" in result.stderr
    assert "hunt" not in result.stderr and "er42x" not in result.stderr
