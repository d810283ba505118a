"""The project's source read as text, for the tests of its shape: which modules there are,
what each imports, how long its functions are. Nothing here imports the code it reads."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What is installed (pyproject's packages), and everything else of ours that is Python.
PACKAGED = ("tikk", "server", "dispatcher", "worker_sdk", "history")
EVERYTHING = (*PACKAGED, "devtools", "tests", "examples")


def sources(packages: tuple[str, ...], root: Path = ROOT) -> Iterator[Path]:
    """Every ``.py`` file of ``packages`` under ``root``, the generated stubs left out."""
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if path.relative_to(root).parts[:2] != ("tikk", "v1"):
                yield path


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(tree: ast.Module) -> set[int]:
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(inner) for inner in ast.walk(node)}
    return skipped


def imported(path: Path) -> Iterator[str]:
    """Every module name an import statement of ``path`` names, at any depth, and each
    ``module.name`` it imports from one; imports under ``TYPE_CHECKING`` (no run-time
    effect) are left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    skipped = _type_checking_only(tree)
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def long_functions(paths: Iterator[Path], limit: int, root: Path = ROOT) -> list[str]:
    """``file:line name (n lines)`` of each function longer than ``limit`` lines, counted
    from its ``def`` to the last line of its body."""
    found = []
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                length = node.end_lineno - node.lineno + 1
                if length > limit:
                    where = path.relative_to(root)
                    found.append(f"{where}:{node.lineno} {node.name} ({length} lines)")
    return found
