"""The dependency audit step of CI (``scripts/audit-deps.sh``): strict, loud when it cannot
audit, and ignoring an advisory only with a stated reason.

pip-audit needs its advisory service, so these tests put a small stand-in interpreter in
``PY`` that records how it was called and exits as told; what is checked is the script's
own handling of the ignore file, of failures and of its time limit.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "audit-deps.sh"


def run(
    tmp_path: Path, ignore: str = "", rc: int = 0, sleep_s: int = 0, limit_s: int = 60
) -> subprocess.CompletedProcess[str]:
    fake = tmp_path / "python"
    fake.write_text(f'#!/usr/bin/env bash\necho "called: $*"\nsleep {sleep_s}\nexit {rc}\n')
    fake.chmod(0o755)
    ignore_file = tmp_path / "ignore"
    ignore_file.write_text(ignore)
    env = {
        **os.environ, "PY": str(fake), "AUDIT_IGNORE_FILE": str(ignore_file),
        "AUDIT_TIMEOUT_S": str(limit_s),
    }  # fmt: skip
    return subprocess.run(
        ["bash", str(SCRIPT)], check=False, env=env, capture_output=True, text=True, timeout=60
    )


def test_the_audit_is_strict_and_passes_when_pip_audit_does(tmp_path: Path) -> None:
    done = run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "called: -m pip_audit --strict --skip-editable" in done.stdout


def test_an_advisory_is_ignored_with_its_reason_shown(tmp_path: Path) -> None:
    ignore = "# accepted advisories\n\nGHSA-1234-abcd only the unused XML parser is affected\n"
    done = run(tmp_path, ignore)
    assert done.returncode == 0, done.stderr
    assert "ignoring GHSA-1234-abcd: only the unused XML parser is affected" in done.stdout
    assert "--ignore-vuln GHSA-1234-abcd" in done.stdout


def test_an_advisory_ignored_without_a_reason_fails_the_run(tmp_path: Path) -> None:
    done = run(tmp_path, "PYSEC-2026-1\n")
    assert done.returncode == 1
    assert "PYSEC-2026-1 is ignored without a reason" in done.stderr
    assert "called:" not in done.stdout


def test_a_finding_or_an_audit_that_could_not_run_fails_loudly(tmp_path: Path) -> None:
    done = run(tmp_path, rc=1)
    assert done.returncode == 1
    assert "audit: FAILED (exit 1)" in done.stderr


def test_an_audit_over_its_time_limit_fails(tmp_path: Path) -> None:
    done = run(tmp_path, sleep_s=20, limit_s=1)
    assert done.returncode == 1
    assert "did not finish within 1 s" in done.stderr
