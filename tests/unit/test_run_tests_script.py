"""The test runner CI calls: skips are shown with their reasons, and fail a CI run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.services import in_ci

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "run-tests.sh"


@pytest.mark.parametrize(
    ("value", "expected"),
    [("true", True), ("1", True), ("yes", True), ("TRUE", True),
     ("", False), ("0", False), ("false", False), ("False", False)],
)  # fmt: skip
def test_any_ci_value_but_empty_0_or_false_counts(value: str, expected: bool) -> None:
    assert in_ci({"CI": value}) is expected
    assert in_ci({}) is False


def run(tmp_path: Path, ci: str) -> subprocess.CompletedProcess[str]:
    tests = tmp_path / "test_sample.py"
    tests.write_text(
        "import pytest\n"
        "def test_runs():\n    assert True\n"
        "def test_needs_a_service():\n    pytest.skip('kafka is not reachable')\n"
    )
    env = {**os.environ, "CI": ci, "PY": sys.executable}
    return subprocess.run(
        ["bash", str(SCRIPT), str(tests)],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_skip_fails_a_ci_run_and_its_reason_is_printed(tmp_path: Path) -> None:
    done = run(tmp_path, "1")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "kafka is not reachable" in done.stdout
    assert "1 test(s) skipped under CI" in done.stderr


def test_a_skip_outside_ci_is_reported_but_passes(tmp_path: Path) -> None:
    done = run(tmp_path, "0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "kafka is not reachable" in done.stdout


def test_a_run_that_collected_nothing_fails(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {**os.environ, "CI": "0", "PY": sys.executable}
    done = subprocess.run(
        ["bash", str(SCRIPT), str(empty)],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert "collected no tests" in done.stderr
