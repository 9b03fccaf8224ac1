"""The wheel carries the SQL: built, installed in a clean venv, it migrates a scratch database;
built from a checkout that has no symlinks, it still does."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import psycopg
import pytest

from noeta.backends.stores.migrations import load_migrations

REPOSITORY = Path(__file__).parents[1]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_installed_wheel_migrates_a_scratch_database(tmp_path: Path, postgres_url: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path), "."],
        cwd=REPOSITORY,
        check=True,
    )
    (wheel,) = tmp_path.glob("noeta-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "noeta/_sql/postgres/0001_create_tasks.sql" in names
    assert "noeta/_sql/sqlite/0001_create_tasks.sql" in names
    # noeta web's page layout, stylesheet and script ship as package data (no CDN).
    for asset in ("layout.html", "noeta.css", "live.js"):
        assert f"noeta/web/static/{asset}" in names

    clean = tmp_path / "clean-venv"
    venv.create(clean, with_pip=True)
    subprocess.run([clean / "bin" / "pip", "install", "--quiet", str(wheel)], check=True)
    # Run from an empty folder, so nothing from the source tree can be imported.
    result = subprocess.run(
        [clean / "bin" / "noeta", "db", "migrate", "--store", postgres_url],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "applied 0001_create_tasks" in result.stdout
    with psycopg.connect(postgres_url) as connection:
        row = connection.execute("SELECT max(version) FROM noeta_migrations").fetchone()
    newest = max(migration.version for migration in load_migrations("postgres"))
    assert row is not None and row[0] == newest >= 6


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_wheel_built_from_a_checkout_without_symlinks_migrates(
    tmp_path: Path, postgres_url: str
) -> None:
    """What `core.symlinks=false` checks out (Windows, some CI): the committed tree, any
    symlink a plain file holding its target. The wheel built there must carry the SQL."""
    checkout = tmp_path / "checkout"
    git = ["git", "-c", "core.symlinks=false", "clone", "--quiet", str(REPOSITORY), str(checkout)]
    subprocess.run(git, check=True)
    built = tmp_path / "built"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(built), "."],
        cwd=checkout,
        check=True,
    )
    (wheel,) = built.glob("noeta-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "noeta/_sql/postgres/0001_create_tasks.sql" in names
    assert "noeta/_sql/postgres/functions/noeta_fence.sql" in names
    assert not [name for name in names if name.startswith("queue/")]
    unpacked = tmp_path / "unpacked"
    zipfile.ZipFile(wheel).extractall(unpacked)
    # The unpacked wheel comes first on the path (before this venv's editable noeta), this
    # venv's dependencies after it; from an empty folder, so the checkout is not importable.
    empty = tmp_path / "empty"
    empty.mkdir()
    environment = {**os.environ, "PYTHONPATH": str(unpacked), "NOETA_STORE": postgres_url}
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
    with psycopg.connect(postgres_url) as connection:
        row = connection.execute("SELECT max(version) FROM noeta_migrations").fetchone()
    newest = max(migration.version for migration in load_migrations("postgres"))
    assert row is not None and row[0] == newest >= 16
