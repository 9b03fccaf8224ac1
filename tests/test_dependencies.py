"""What noeta imports it declares, and within bounds; the tools CI gates on are pinned.

A distribution that is only there because another one brings it can vanish or change its
API with that other one's next release, and an unpinned linter can turn CI red with no
change here (issue 27)."""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPOSITORY = Path(__file__).parents[1]
PROJECT = tomllib.loads((REPOSITORY / "pyproject.toml").read_text())["project"]
# Time-zone data, versioned by date: any newer one is right.
UNBOUNDED = {"tzdata"}


def requirements(group: str | None) -> list[Requirement]:
    lines = PROJECT["dependencies"] if group is None else PROJECT["optional-dependencies"][group]
    return [Requirement(line) for line in lines]


def declared() -> set[str]:
    groups = [None, *PROJECT["optional-dependencies"]]
    return {canonicalize_name(each.name) for group in groups for each in requirements(group)}


def imported_modules() -> set[str]:
    """The top-level names every module under noeta/ imports, lazily or not."""
    found: set[str] = set()
    for path in (REPOSITORY / "noeta").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {alias.name.partition(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.partition(".")[0])
    return found - set(sys.stdlib_module_names) - {"noeta", "__future__"}


def test_every_distribution_noeta_imports_is_declared() -> None:
    owners = packages_distributions()
    undeclared = {
        module: owners.get(module)
        for module in imported_modules()
        if not {canonicalize_name(name) for name in owners.get(module, [])} & declared()
    }
    assert undeclared == {}


def test_every_runtime_dependency_has_an_upper_bound() -> None:
    unbounded = [
        str(each)
        for each in requirements(None)
        if each.name not in UNBOUNDED
        and not any(s.operator in ("<", "<=", "==", "~=") for s in each.specifier)
    ]
    assert unbounded == []


def test_the_dev_tools_are_pinned_by_the_constraints_make_install_uses() -> None:
    constraints = REPOSITORY / "constraints-dev.txt"
    pins = {}
    for line in constraints.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            pin = Requirement(line)
            pins[canonicalize_name(pin.name)] = pin
    tools = [each for each in requirements("dev") if canonicalize_name(each.name) != "noeta"]
    for tool in tools:
        pin = pins.get(canonicalize_name(tool.name))
        assert pin is not None, f"{tool.name} is not pinned in {constraints.name}"
        (exact,) = pin.specifier
        assert exact.operator == "==" and tool.specifier.contains(exact.version), pin
    install = (REPOSITORY / "Makefile").read_text().partition("\ninstall:")[2].partition("\n\n")[0]
    assert "-c constraints-dev.txt" in install
