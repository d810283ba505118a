"""ARCHITECTURE.md's import table is the code's: each folder imports, besides the standard
library and itself, exactly what its row names (nothing more, and nothing the row names is
unused). The table is read from the document, so changing either alone fails here."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tests.source_tree import ROOT, imported

# First-party names are compared by package: the subpackages of tikk, each other package.
_TIKK_SUBPACKAGES = {"client", "drivers", "store", "v1", "schedules"}
_ROW = re.compile(r"^\| `(?P<folder>[\w/]+/)`[^|]*\| (?P<imports>[^|]*)\|")
_NAME = re.compile(r"`([\w.]+)`")


def granule(module: str) -> str:
    """What a table row names for ``module``: ``tikk`` for the domain (tikk's top modules),
    ``tikk.<sub>`` for its subpackages, the distribution's package otherwise."""
    parts = module.split(".")
    if parts[0] == "tikk":
        return f"tikk.{parts[1]}" if len(parts) > 1 and parts[1] in _TIKK_SUBPACKAGES else "tikk"
    return "google.protobuf" if parts[0] == "google" else parts[0]


def table(doc: str) -> dict[str, tuple[bool, set[str]]]:
    """Each row: folder → (everything allowed but the names, the names)."""
    rows = {}
    for line in doc.splitlines():
        if m := _ROW.match(line):
            text = m["imports"]
            rows[m["folder"]] = (text.startswith("everything"), set(_NAME.findall(text)))
    return rows


def files_of(folder: str, folders: set[str], root: Path = ROOT) -> list[Path]:
    """The modules of ``folder``, leaving out those of a deeper folder with a row of its own."""
    deeper = [f for f in folders if f != folder and f.startswith(folder)]
    return [
        path
        for path in sorted((root / folder).rglob("*.py"))
        if not any(path.relative_to(root).as_posix().startswith(d) for d in deeper)
        and not path.relative_to(root).as_posix().startswith("tikk/v1/")
    ]


def imports_of(folder: str, folders: set[str], root: Path = ROOT) -> set[str]:
    own = granule(folder.rstrip("/").replace("/", "."))
    return {
        granule(name)
        for path in files_of(folder, folders, root)
        for name in imported(path)
        if name.split(".")[0] not in sys.stdlib_module_names and name != "__future__"
    } - {own}


def mismatches(doc: str, root: Path = ROOT) -> list[str]:
    rows = table(doc)
    found = []
    for folder, (everything, names) in sorted(rows.items()):
        actual = imports_of(folder, set(rows), root)
        if everything:
            found += [f"{folder} imports {n}" for n in sorted(actual & names)]
            continue
        found += [f"{folder} imports {n}, not in its row" for n in sorted(actual - names)]
        found += [f"{folder}'s row names {n}, which it does not import" for n in names - actual]
    return found


def test_the_import_table_is_the_code() -> None:
    doc = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert len(table(doc)) >= 8  # the table was found
    assert mismatches(doc) == []


def test_a_row_that_drifted_is_named(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "m.py").write_text("import grpc\nimport os\nfrom tikk.store import x\n")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "m.py").write_text("import devtools.stack\n")
    doc = "| `a/` | `grpc`, `croniter` | why |\n| `b/` | everything but `devtools` | why |\n"
    assert mismatches(doc, tmp_path) == [
        "a/ imports tikk.store, not in its row",
        "a/'s row names croniter, which it does not import",
        "b/ imports devtools",
    ]
