"""The wheel carries the SQL: built from a checkout that has no symlinks (what
`core.symlinks=false` checks out: Windows, some CI), installed in a clean venv, its
`noeta` command migrates a scratch database; unpacked ahead of the path, it does too.

No test reaches beyond 127.0.0.1: the clean venv installs the wheel alone (`--no-index
--no-deps`) and reaches its dependencies in this venv's site-packages through a `.pth`
line, which adds that folder to the path but runs none of its `.pth` files, so this
checkout's editable noeta is never importable there."""

from __future__ import annotations

import os
import site
import subprocess
import sys
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from noeta.backends.stores.migrations import load_migrations

REPOSITORY = Path(__file__).parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The wheel built from a symlink-free clone of this repository's committed tree."""
    folder = tmp_path_factory.mktemp("wheel")
    checkout = folder / "checkout"
    git = ["git", "-c", "core.symlinks=false", "clone", "--quiet", str(REPOSITORY), str(checkout)]
    subprocess.run(git, check=True)
    built = folder / "built"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(built), "."],
        cwd=checkout,
        check=True,
    )
    (path,) = built.glob("noeta-*.whl")
    yield path


def newest_applied(url: str) -> int:
    with psycopg.connect(url) as connection:
        row = connection.execute("SELECT max(version) FROM noeta_migrations").fetchone()
    assert row is not None
    return int(row[0])


NEWEST = max(migration.version for migration in load_migrations("postgres"))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_wheel_carries_the_sql_and_the_web_assets(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "noeta/_sql/postgres/0001_create_tasks.sql" in names
    assert "noeta/_sql/sqlite/0001_create_tasks.sql" in names
    assert "noeta/_sql/postgres/functions/noeta_fence.sql" in names
    assert not [name for name in names if name.startswith("queue/")]
    # noeta web's page layout, stylesheet and script ship as package data (no CDN).
    for asset in ("layout.html", "noeta.css", "live.js"):
        assert f"noeta/web/static/{asset}" in names


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_installed_wheel_migrates_a_scratch_database(
    tmp_path: Path, wheel: Path, empty_postgres_url: str
) -> None:
    clean = tmp_path / "clean-venv"
    venv.create(clean, with_pip=False)  # this venv's pip installs into it: no ensurepip
    install = ["install", "--quiet", "--no-index", "--no-deps", str(wheel)]
    pip = [sys.executable, "-m", "pip", "--python", str(clean / "bin" / "python")]
    subprocess.run([*pip, *install], check=True)
    (packages,) = clean.glob("lib/python*/site-packages")
    (packages / "zz-dependencies.pth").write_text(f"{site.getsitepackages()[0]}\n")
    # Run from an empty folder, so nothing from the source tree can be imported.
    which = subprocess.run(
        [clean / "bin" / "python", "-c", "import noeta; print(noeta.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert which.stdout.startswith(str(packages)), which.stdout
    result = subprocess.run(
        [clean / "bin" / "noeta", "db", "migrate", "--store", empty_postgres_url],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "applied 0001_create_tasks" in result.stdout
    assert newest_applied(empty_postgres_url) == NEWEST >= 16


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_unpacked_wheel_ahead_of_the_path_migrates(
    tmp_path: Path, wheel: Path, empty_postgres_url: str
) -> None:
    unpacked = tmp_path / "unpacked"
    zipfile.ZipFile(wheel).extractall(unpacked)
    # The unpacked wheel comes first on the path (before this venv's editable noeta), this
    # venv's dependencies after it; from an empty folder, so the checkout is not importable.
    empty = tmp_path / "empty"
    empty.mkdir()
    environment = {**os.environ, "PYTHONPATH": str(unpacked), "NOETA_STORE": empty_postgres_url}
    which = subprocess.run(
        [sys.executable, "-c", "import noeta; print(noeta.__file__)"],
        cwd=empty,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    assert which.stdout.startswith(str(unpacked)), which.stdout
    result = subprocess.run(
        [sys.executable, "-m", "noeta", "db", "migrate"],
        cwd=empty,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert newest_applied(empty_postgres_url) == NEWEST >= 16
