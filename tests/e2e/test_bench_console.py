"""``python -m devtools bench-console`` at a small size, run for real (``tikk dev`` and a
worker on a store filled by the bare driver): every page answers with what it is for, and
the figures are written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[2]


def test_every_page_is_timed_with_the_store_filled(tmp_path: Path) -> None:
    out = tmp_path / "console"
    done = subprocess.run(
        [sys.executable, "-m", "devtools", "bench-console", "--stored", "5000", "--succeeded",
         "20", "--dead", "30", "--rounds", "2", "--out", str(out)],
        cwd=ROOT, env=os.environ.copy(), capture_output=True, text=True, timeout=280,
        check=False,
    )  # fmt: skip
    # The tool itself refuses a page that does not show what it is for (a task's state, a
    # dead letter's error, the upcoming count, ...), so exit 0 means each page had it.
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads((out / "console.json").read_text())
    assert figures["config"]["stored"] == 5_000
    pages = {p["page"]: p for p in figures["pages"]}
    assert {"overview", "task, one of those stored", "dead letters", "upcoming, 60 minutes",
            "a schedule", "/metrics"} <= pages.keys()  # fmt: skip
    assert all(0 < p["p50_ms"] <= p["max_ms"] < 30_000 for p in pages.values())
    assert "| dead letters, filter matching none |" in (out / "console.md").read_text()
