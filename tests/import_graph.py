"""The product's module import graph, read from the AST (no module is executed), and its import circles.

An edge runs from a module to each product module it imports, at any depth (function-level and type-only imports
count: a circle through a function body is still a circle in the design). `from a.b import c` points at `a.b.c`
when that is a module, else at `a.b`. Used by tests/test_import_rules.py and scripts/layout_report.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rollout", "trainer_plugins")
GENERATED = "rollout/protocol/generated"


def sources(root: Path = ROOT) -> list[Path]:
    return sorted(p for d in PACKAGES for p in (root / d).rglob("*.py"))


def product_sources(root: Path = ROOT) -> list[Path]:
    """The hand-written product files (the generated stubs left out)."""
    return [p for p in sources(root) if not p.relative_to(root).as_posix().startswith(GENERATED)]


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(path: Path) -> set[str]:
    """Every absolute module a file imports, and `module.name` for each name it takes from one."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the product modules it imports (itself left out)."""
    paths = {module_name(p, root): p for p in sources(root)}
    graph: dict[str, set[str]] = {}
    for mod, path in paths.items():
        targets = {_resolve(name, paths) for name in imported_names(path)}
        graph[mod] = {t for t in targets if t is not None and t != mod}
    return graph


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest product module `name` names (a name taken from a module resolves to that module)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return sorted(circles)


def arrows_back_up(graph: dict[str, set[str]], package: str) -> list[tuple[str, str]]:
    """Imports from inside a sub-package of `package` into a plain module at `package`'s top level (its loop files):
    a sub-package should need only what is below it or beside it, never the loop that uses it."""
    prefix = package + "."
    arrows = []
    for mod, targets in graph.items():
        rest = mod.removeprefix(prefix)
        if not mod.startswith(prefix) or "." not in rest and not _is_package(mod, graph):
            continue
        for target in targets:
            top = target.removeprefix(prefix)
            if target.startswith(prefix) and "." not in top and not _is_package(target, graph):
                arrows.append((mod, target))
    return sorted(arrows)


def _is_package(mod: str, graph: dict[str, set[str]]) -> bool:
    return any(other.startswith(mod + ".") for other in graph)
