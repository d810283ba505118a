"""Rules of the code's shape that review would otherwise have to catch by eye."""

from __future__ import annotations

import ast
from pathlib import Path

SERVER = Path(__file__).resolve().parents[2] / "server"
# Lines of one function, from its ``def`` line to the last line of its body.
MAX_FUNCTION_LINES = 40


def _long_functions(root: Path, limit: int) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                length = node.end_lineno - node.lineno + 1
                if length > limit:
                    where = path.relative_to(root.parent)
                    found.append(f"{where}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_function_under_server_is_longer_than_the_limit() -> None:
    offenders = _long_functions(SERVER, MAX_FUNCTION_LINES)
    assert not offenders, f"longer than {MAX_FUNCTION_LINES} lines:\n" + "\n".join(offenders)


def test_the_check_sees_a_long_function(tmp_path: Path) -> None:
    package = tmp_path / "server"
    package.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (package / "m.py").write_text(f"def short():\n    pass\n\n\ndef long():\n{body}\n")
    assert _long_functions(package, MAX_FUNCTION_LINES) == [
        f"server/m.py:5 long ({MAX_FUNCTION_LINES + 1} lines)"
    ]
