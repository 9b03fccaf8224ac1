"""The numbered SQL migrations shipped with noeta, and the check of a database against them.

The files live in `queue/<dialect>/NNNN_name.sql` in the repository; the wheel ships
`queue/` as `noeta/_sql/` (pyproject.toml), and noeta run from a checkout (an editable
install) reads `queue/` beside the package. Both dialects carry the same numbers and names.
Each store applies them in one locked transaction and records them in `noeta_migrations`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Literal

from noeta.core.errors import SchemaMismatch

Dialect = Literal["postgres", "sqlite"]

_FILE_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def sql_folder() -> Traversable:
    """`noeta/_sql` in an installed wheel, else the checkout's `queue/` noeta runs from."""
    package = resources.files("noeta")
    shipped = package.joinpath("_sql")
    if shipped.is_dir():
        return shipped
    checkout = Path(str(package)).parent / "queue"
    if (checkout / "postgres").is_dir():
        return checkout
    raise RuntimeError(f"noeta's SQL is missing: neither {shipped} nor {checkout} is a folder")


def load_migrations(dialect: Dialect) -> list[Migration]:
    """Every migration of `dialect`, in version order."""
    folder = sql_folder().joinpath(dialect)
    found = []
    for entry in folder.iterdir():
        match = _FILE_NAME.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda migration: migration.version)
    versions = [migration.version for migration in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"noeta's {dialect} migrations are not numbered 1..n: {versions}")
    return found


def pending(known: list[Migration], applied: dict[int, str]) -> list[Migration]:
    """The migrations still to apply, after checking the applied ones are ours.

    Raises `SchemaMismatch` when the database holds a version this code does not know
    (it was migrated by a newer noeta) or a version under another name.
    """
    latest = known[-1].version if known else 0
    newer = sorted(version for version in applied if version > latest)
    if newer:
        raise SchemaMismatch(
            f"the database schema is at version {newer[-1]}, newer than this noeta "
            f"(which knows up to {latest}); upgrade noeta"
        )
    for migration in known:
        name = applied.get(migration.version)
        if name is not None and name != migration.name:
            raise SchemaMismatch(
                f"the database has migration {migration.version} as {name!r}, "
                f"but this noeta calls it {migration.name!r}"
            )
    return [migration for migration in known if migration.version not in applied]


def require_current(known: list[Migration], applied: dict[int, str]) -> None:
    """Raise `SchemaMismatch` unless every known migration, and no other, is applied."""
    missing = pending(known, applied)
    if missing:
        raise SchemaMismatch(
            f"the database schema is at version {max(applied, default=0)}, this noeta needs "
            f"{known[-1].version}: run `noeta db migrate`"
        )
