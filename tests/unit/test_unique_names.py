"""Names are unique across the project: a public name defined at module level in the packages
means one thing wherever it is read, so no two modules define the same one.

Every public module-level name counts (a class, a function, a constant or any other variable;
not one starting with ``_``), wherever in the module's top level it is bound (inside an ``if``
or a ``try`` as well). The generated stubs (``tikk/v1``) are protobuf's names, not ours.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("tikk", "server", "dispatcher", "worker_sdk", "history")
GENERATED = ("tikk/v1",)

# Names each module under a folder ("" for all) may define for itself, with the reason.
SHARED_NAMES = {
    "log": ("", "each module's logger (logging.getLogger), named for what it logs for"),
    "register": ("server/cli/", "each CLI module's hook adding its sub-commands to the parser"),
    "__all__": ("", "each package's list of what it exports"),
}
# A module that may define a name another module defines too, with the reason.
_CLIENT_OWN = (
    "the Python client imports nothing of the domain (tikk/client/ may import only grpc, "
    "tikk.v1 and the standard-library payload codec), so it spells out the schedule "
    "policy's choices and its own page of a listing for its callers itself"
)
OWN_COPIES = {
    ("tikk/client/specs.py", "CatchUp"): _CLIENT_OWN,
    ("tikk/client/specs.py", "Overlap"): _CLIENT_OWN,
    ("tikk/client/results.py", "Page"): _CLIENT_OWN,
}
# A type variable only links the types in the signatures of its own module: each module that
# needs one declares it, and the same letter in two modules is two unrelated variables.
TYPE_VARIABLE_FACTORIES = {"TypeVar", "ParamSpec", "TypeVarTuple"}


def _is_type_variable(value: ast.expr | None) -> bool:
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
    return name in TYPE_VARIABLE_FACTORIES


def _targets(node: ast.expr) -> Iterator[str]:
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, ast.Tuple | ast.List):
        for element in node.elts:
            yield from _targets(element)


def _bound_names(statements: Sequence[ast.stmt]) -> Iterator[str]:
    """The names these top-level statements bind (not imports: those name a definition
    elsewhere), looking into ``if`` and ``try`` blocks but not into functions or classes."""
    for node in statements:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield node.name
        elif isinstance(node, ast.Assign) and not _is_type_variable(node.value):
            for target in node.targets:
                yield from _targets(target)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            if not _is_type_variable(node.value):
                yield from _targets(node.target)
        elif isinstance(node, ast.If):
            yield from _bound_names([*node.body, *node.orelse])
        elif isinstance(node, ast.Try):
            handlers = [s for h in node.handlers for s in h.body]
            yield from _bound_names([*node.body, *handlers, *node.orelse, *node.finalbody])


def _counted(module: str, name: str) -> bool:
    if name in SHARED_NAMES and module.startswith(SHARED_NAMES[name][0]):
        return False
    return not name.startswith("_") and (module, name) not in OWN_COPIES


def duplicated_names(root: Path, packages: Sequence[str]) -> dict[str, list[str]]:
    """Each public name that more than one module under ``packages`` defines, with the
    modules (paths relative to ``root``)."""
    where: dict[str, set[str]] = defaultdict(set)
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            module = path.relative_to(root).as_posix()
            if module.startswith(tuple(f"{g}/" for g in GENERATED)):
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for name in _bound_names(tree.body):
                if _counted(module, name):
                    where[name].add(module)
    return {name: sorted(modules) for name, modules in sorted(where.items()) if len(modules) > 1}


def test_no_public_name_is_defined_in_two_modules() -> None:
    found = duplicated_names(ROOT, PACKAGES)
    assert not found, "defined in more than one module:\n" + "\n".join(
        f"{name}: {', '.join(modules)}" for name, modules in found.items()
    )


def test_the_check_sees_a_name_defined_twice(tmp_path: Path) -> None:
    (tmp_path / "tikk" / "v1").mkdir(parents=True)
    (tmp_path / "server").mkdir()
    (tmp_path / "tikk" / "a.py").write_text(
        "import logging\nfrom typing import TypeVar\n\n"
        "T = TypeVar('T')\nlog = logging.getLogger('a')\n_PRIVATE = 1\nLIMIT = 1\n\n"
        "def encode() -> None: ...\n\n\ndef register() -> None: ...\n"
    )
    (tmp_path / "server" / "b.py").write_text(
        "import logging\nfrom typing import TypeVar\n\n"
        "T = TypeVar('T')\nlog = logging.getLogger('b')\n_PRIVATE = 2\n\n"
        "try:\n    LIMIT = 2\nexcept ImportError:\n    LIMIT = 3\n\n"
        "class encode: ...\n\n\ndef register() -> None: ...\n"
    )
    (tmp_path / "server" / "cli").mkdir()
    (tmp_path / "server" / "cli" / "c.py").write_text("def register() -> None: ...\n")
    (tmp_path / "tikk" / "v1" / "stubs_pb2.py").write_text("LIMIT = 4\n")
    assert duplicated_names(tmp_path, ("tikk", "server")) == {
        "LIMIT": ["server/b.py", "tikk/a.py"],
        "encode": ["server/b.py", "tikk/a.py"],
        "register": ["server/b.py", "tikk/a.py"],  # a CLI hook only under server/cli/
    }
