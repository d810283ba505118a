"""Rules of the code's shape that review would otherwise have to catch by eye (see
ARCHITECTURE.md, "Layout"): short functions and modules everywhere, and the layers of
``server/`` kept apart: the gRPC edge converts and calls one operation, the operations know no
protobuf, and the installed package never reaches into the checkout-only tools."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.source_tree import EVERYTHING, PACKAGED, ROOT, imported, long_functions, sources

# Lines of one function, from its ``def`` to the last line of its body, in any package.
MAX_FUNCTION_LINES = 40
# Lines of one module of the installed package (devtools and tests are not held to it).
MAX_MODULE_LINES = 450

# What each layer may not import, by module-name prefix.
FORBIDDEN = {
    # The gRPC edge: protobuf in, one call of server.ops, protobuf out. Stores, history,
    # queues and the quota and late-write machinery are the operations' own.
    "server/api": (
        "tikk.store", "tikk.drivers", "history", "dispatcher", "server.wiring",
        "server.ops.quotas", "server.ops.late_writes",
    ),
    # The operations work on domain objects: protobuf stays at the edge.
    "server/ops": ("tikk.v1", "google.protobuf", "grpc"),
    # devtools needs the checkout; nothing installed may depend on it.
    "server": ("devtools",),
    "tikk": ("devtools", "server"),
    "dispatcher": ("devtools", "server"),
    "history": ("devtools", "server", "dispatcher"),
}  # fmt: skip
_STUB = re.compile(r"_pb2_grpc\.\w+Stub\(")


def _matches(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def forbidden_imports(folder: str, prefixes: tuple[str, ...], root: Path = ROOT) -> list[str]:
    return [
        f"{path.relative_to(root)}: {name}"
        for path in sorted((root / folder).rglob("*.py"))
        for name in sorted(set(imported(path)))
        if any(_matches(name, prefix) for prefix in prefixes)
    ]


def long_modules(packages: tuple[str, ...], limit: int, root: Path = ROOT) -> list[str]:
    return [
        f"{path.relative_to(root)} ({n} lines)"
        for path in sources(packages, root)
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > limit
    ]


def test_no_function_is_longer_than_the_limit() -> None:
    offenders = long_functions(sources(EVERYTHING), MAX_FUNCTION_LINES)
    assert not offenders, f"longer than {MAX_FUNCTION_LINES} lines:\n" + "\n".join(offenders)


def test_no_module_of_the_installed_package_is_longer_than_the_limit() -> None:
    offenders = long_modules(PACKAGED, MAX_MODULE_LINES)
    assert not offenders, f"longer than {MAX_MODULE_LINES} lines:\n" + "\n".join(offenders)


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_each_layer_imports_only_what_it_may(folder: str) -> None:
    assert forbidden_imports(folder, FORBIDDEN[folder]) == []


def test_the_cli_calls_the_server_only_through_the_client() -> None:
    raw = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / "server" / "cli").rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _STUB.search(line)
    ]
    assert raw == []


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    package = tmp_path / "server" / "api"
    package.mkdir(parents=True)
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (package / "m.py").write_text(
        "from tikk.store.tasks import TaskStore\nimport history.sqlite\nimport tikk.model\n\n"
        f"def short():\n    pass\n\n\ndef long():\n{body}\n"
    )
    assert long_functions(iter([package / "m.py"]), MAX_FUNCTION_LINES, tmp_path) == [
        f"server/api/m.py:9 long ({MAX_FUNCTION_LINES + 1} lines)"
    ]
    assert long_modules(("server",), 10, tmp_path) == ["server/api/m.py (49 lines)"]
    assert forbidden_imports("server/api", FORBIDDEN["server/api"], tmp_path) == [
        "server/api/m.py: history.sqlite",
        "server/api/m.py: tikk.store.tasks",
        "server/api/m.py: tikk.store.tasks.TaskStore",
    ]
