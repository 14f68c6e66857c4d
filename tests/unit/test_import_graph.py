"""No import circle anywhere in Corral: not at module level, not hidden in a function, not
under ``TYPE_CHECKING``. The graph is read from the source (every ``import`` statement, wherever
it stands), so a circle cannot hide behind a late import the way it can from import-linter's
layers contracts, which only cover the packages they name."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOP = ("shared", "services", "workers")  # installed as corral.shared, corral.services, ...


def _modules() -> dict[str, Path]:
    found = {}
    for top in TOP:
        for path in (REPO / top).rglob("*.py"):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(["corral", *parts])] = path
    return found


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _imported(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The Corral modules ``name`` imports, by every import statement in it."""
    package = _package_of(name, path)
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            # `from pkg import mod` imports the module pkg.mod; `from mod import name`, mod.
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            ]
        else:
            continue
        for target in targets:
            if target in known and target != name:
                yield target


def _graph() -> dict[str, set[str]]:
    known = _modules()
    return {name: set(_imported(name, path, known)) for name, path in known.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_graph_is_read() -> None:
    graph = _graph()
    # Known edges, so that a reader that finds nothing cannot pass for a graph without circles.
    assert "corral.shared.routing" in graph["corral.shared.records"]
    assert "corral.shared.scheduling.det_pool_state" in graph["corral.shared.scheduling.fair_share"]
    assert "corral.services.runtime.deps" in graph["corral.services.runtime.launch"]


def test_the_circle_finder_finds_circles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert _circles(graph) == [["a", "b", "c"]]


def test_no_import_circle() -> None:
    circles = _circles(_graph())
    assert circles == [], "import circles: " + "; ".join(" <-> ".join(c) for c in circles)
