"""No import cycle in noeta/: its static import graph, read with ast, has no strong component.

Every import counts, also those under `if TYPE_CHECKING:` and inside functions: a cycle a
lazy import hides is still two modules that cannot be understood one without the other.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

PACKAGE = Path(__file__).parents[1] / "noeta"


def module_names(root: Path) -> dict[str, Path]:
    """Every module under `root` (a package directory), by its dotted name."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def imported_modules(name: str, path: Path, known: Mapping[str, Path]) -> set[str]:
    """The package's own modules that `name` imports anywhere in its text."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            # `from a import b` imports the module a.b if there is one, else a name of a.
            targets = [f"{base}.{alias.name}" for alias in node.names]
            targets = [t if t in known else base for t in targets]
        else:
            continue
        found.update(target for target in targets if target in known and target != name)
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    known = module_names(root)
    return {name: imported_modules(name, path, known) for name, path in known.items()}


def cycles(graph: Mapping[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected parts of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    part = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        part.add(member)
                        if member == node:
                            break
                    if len(part) > 1:
                        found.append(frozenset(part))
    return found


def describe(part: frozenset[str], graph: Mapping[str, set[str]]) -> str:
    """Each module of the cycle with what it imports inside the cycle."""
    return "; ".join(f"{m} -> {', '.join(sorted(graph[m] & part))}" for m in sorted(part))


def test_noeta_has_no_import_cycle() -> None:
    graph = import_graph(PACKAGE)
    found = cycles(graph)
    assert not found, "import cycles in noeta/:\n" + "\n".join(
        describe(part, graph) for part in found
    )


def test_the_graph_sees_type_checking_relative_and_function_imports(tmp_path: Path) -> None:
    """The checker itself: each kind of import that can close a cycle is an edge."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from . import leaf\n")
    (package / "sub" / "leaf.py").write_text("def f():\n    from pkg import top\n")
    (package / "top.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub.leaf import f\n"
    )
    (package / "alone.py").write_text("import pkg.top\nfrom pkg.sub import leaf\n")
    graph = import_graph(package)
    assert graph["pkg.sub"] == {"pkg.sub.leaf"}
    assert graph["pkg.top"] == {"pkg.sub.leaf"}
    assert graph["pkg.alone"] == {"pkg.top", "pkg.sub.leaf"}
    assert cycles(graph) == [frozenset({"pkg.top", "pkg.sub.leaf"})]


def test_the_readers_of_a_task_do_not_import_the_runner() -> None:
    """The client and the web pages read a task's state through the kernel's read side
    (noeta.core.task_loading); running a task is not theirs (issue 27, item 3)."""
    graph = import_graph(PACKAGE)
    readers = [name for name in graph if name.startswith(("noeta.client", "noeta.web"))]
    reaching = {
        name: sorted(target for target in graph[name] if target.startswith("noeta.core.runner"))
        for name in readers
    }
    assert not {name: targets for name, targets in reaching.items() if targets}


def test_the_pure_rules_import_only_the_ports_the_errors_and_each_other() -> None:
    """noeta/core/rules/ is the kernel's pure part: what it may import is the ports
    (noeta/core/ports/), the error tree and other rules (issue 27, item 2)."""
    graph = import_graph(PACKAGE)
    allowed = ("noeta.core.ports", "noeta.core.rules", "noeta.core.errors")
    rules = [name for name in graph if name.startswith("noeta.core.rules.")]
    assert len(rules) > 10
    outside = {name: sorted(t for t in graph[name] if not t.startswith(allowed)) for name in rules}
    assert not {name: targets for name, targets in outside.items() if targets}
