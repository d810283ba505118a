"""The tools ``scripts/deploy-check.sh`` builds into ``.tools/`` (helm, kubeconform, promtool,
the Kubernetes schemas). ``make test`` builds them beside the tests at the lowest CPU priority
(``scripts/test.sh``), naming the build's process in ``.tools/.building`` meanwhile: a test
that needs a tool waits for that build to end, then skips if the tool is still missing (which
fails a CI run, ``scripts/run-tests.sh``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.waiting import eventually

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / ".tools"
BIN = TOOLS / "bin"
SCHEMAS = TOOLS / "schemas"
BUILDING = TOOLS / ".building"
# Longer than a fresh machine's build of all three tools at the lowest priority.
BUILD_WAIT_S = 1_800.0


def built(path: Path, marker: Path = BUILDING) -> Path:
    """``path`` once the build ``marker`` names is not under way; skips the test if ``path``
    is not there then."""
    eventually(lambda: not build_under_way(marker), timeout=BUILD_WAIT_S, every=0.2)
    if not path.exists():
        pytest.skip(f"scripts/deploy-check.sh builds {path.name}")
    return path


def build_under_way(marker: Path) -> bool:
    """Whether ``marker`` names the pid of a process that is still running (an ended one
    its parent has not reaped yet is a zombie: not running)."""
    try:
        pid = int(marker.read_text().strip())
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"
