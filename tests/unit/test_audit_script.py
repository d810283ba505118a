"""The dependency audit step of CI (``scripts/audit-deps.sh`` and ``devtools.audit_report``):
a finding fails the run, a dependency the advisory service could not look up is reported as
not audited (failing only when an audit is required), and an advisory is ignored only with a
stated reason.

pip-audit needs its advisory service, so these tests put a small stand-in interpreter in
``PY``: called as pip-audit it records its arguments and writes the report it is given; any
other call goes to the real interpreter, so the report is judged by the real code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "audit-deps.sh"
CLEAN = {"dependencies": [{"name": "grpcio", "version": "1.85.3", "vulns": []}], "fixes": []}
VULNERABLE = {
    "dependencies": [
        {"name": "grpcio", "version": "1.0", "vulns": [{"id": "GHSA-x", "fix_versions": ["1.1"]}]}
    ],
    "fixes": [],
}
UNREACHABLE = {
    "dependencies": [{"name": "grpcio", "skip_reason": "Dependency not found on PyPI"}],
    "fixes": [],
}


def run(
    tmp_path: Path,
    report: dict[str, Any] | None = CLEAN,
    ignore: str = "",
    sleep_s: int = 0,
    limit_s: int = 60,
    required: bool = False,
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "report.json").write_text(json.dumps(report) if report is not None else "")
    fake = tmp_path / "python"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        'if [ "$2" = pip_audit ]; then\n'
        '  echo "called: $*"\n'
        f"  sleep {sleep_s}\n"
        '  while [ $# -gt 0 ]; do [ "$1" = --output ] && out=$2; shift; done\n'
        f'  cp {tmp_path / "report.json"} "$out"\n'
        "  exit 0\n"
        "fi\n"
        f'exec {sys.executable} "$@"\n'
    )
    fake.chmod(0o755)
    ignore_file = tmp_path / "ignore"
    ignore_file.write_text(ignore)
    env = {
        **os.environ, "PY": str(fake), "AUDIT_IGNORE_FILE": str(ignore_file),
        "AUDIT_TIMEOUT_S": str(limit_s), "PYTHONPATH": str(ROOT),
        "TIKK_AUDIT_REQUIRED": "1" if required else "",
    }  # fmt: skip
    return subprocess.run(
        ["bash", str(SCRIPT)], check=False, env=env, capture_output=True, text=True, timeout=60
    )


def test_a_clean_audit_passes(tmp_path: Path) -> None:
    done = run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "called: -m pip_audit --skip-editable" in done.stdout
    assert "1 dependencies, no known vulnerability" in done.stdout


def test_a_known_vulnerability_fails_the_run_naming_it(tmp_path: Path) -> None:
    done = run(tmp_path, VULNERABLE)
    assert done.returncode == 1
    assert "grpcio 1.0: GHSA-x (fixed in 1.1)" in done.stderr


def test_an_audit_that_could_not_look_up_says_so_and_fails_when_required(tmp_path: Path) -> None:
    done = run(tmp_path, UNREACHABLE)
    assert done.returncode == 0, done.stderr
    assert "NOT AUDITED: the advisory service answered for 0 of 1" in done.stdout
    required = run(tmp_path, UNREACHABLE, required=True)
    assert required.returncode == 3
    assert "NOT AUDITED" in required.stderr


def test_an_advisory_is_ignored_with_its_reason_shown(tmp_path: Path) -> None:
    ignore = "# accepted advisories\n\nGHSA-1234-abcd only the unused XML parser is affected\n"
    done = run(tmp_path, ignore=ignore)
    assert done.returncode == 0, done.stderr
    assert "ignoring GHSA-1234-abcd: only the unused XML parser is affected" in done.stdout
    assert "--ignore-vuln GHSA-1234-abcd" in done.stdout


def test_an_advisory_ignored_without_a_reason_fails_the_run(tmp_path: Path) -> None:
    done = run(tmp_path, ignore="PYSEC-2026-1\n")
    assert done.returncode == 1
    assert "PYSEC-2026-1 is ignored without a reason" in done.stderr
    assert "called:" not in done.stdout


def test_no_report_fails_the_run(tmp_path: Path) -> None:
    done = run(tmp_path, None)
    assert done.returncode == 1
    assert "pip-audit wrote no report" in done.stderr


def test_an_audit_over_its_time_limit_fails(tmp_path: Path) -> None:
    done = run(tmp_path, sleep_s=20, limit_s=1)
    assert done.returncode == 1
    assert "did not finish within 1 s" in done.stderr
