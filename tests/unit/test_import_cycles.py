"""No module of tikk imports, at run time, a module that imports it back (directly or through
others): each package's layering stays visible in its imports. Imports under
``TYPE_CHECKING`` create no cycle at run time and are not counted."""

from __future__ import annotations

from pathlib import Path

from tests.source_tree import PACKAGED, imported, module_name, sources

# The packages whose modules must not import each other in a circle (tests and examples
# import freely, and nothing imports them).
PACKAGES = (*PACKAGED, "devtools")


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sources(PACKAGES)}


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    return {
        name: {m for m in imported(path) if m in mods and m != name} for name, path in mods.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_back_into_one_that_imports_it() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
