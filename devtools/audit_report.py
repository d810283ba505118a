"""Reads pip-audit's JSON report and decides the audit step of CI (``scripts/audit-deps.sh``).

Three outcomes, kept apart because they mean different things:

- a known vulnerability in a dependency: the run fails (exit 1), naming each one;
- every dependency looked up: the audit passed (exit 0);
- dependencies the advisory service could not answer for: the audit did not happen for them.
  That is said loudly, with pip-audit's reason, and fails the run only when
  ``$TIKK_AUDIT_REQUIRED`` is set (``1``): a machine with no route to any advisory service
  (pip-audit's PyPI and OSV services) would otherwise be red for ever, while a silent pass
  would claim an audit that never ran.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

EXIT_PASSED, EXIT_VULNERABLE, EXIT_NOT_AUDITED = 0, 1, 3


def decide(report: dict[str, Any], required: bool) -> tuple[int, list[str]]:
    """The exit code and the lines to print for pip-audit's JSON ``report``."""
    deps = report.get("dependencies", [])
    found = [
        f"audit: {d['name']} {d.get('version', '')}: {v.get('id')} "
        f"(fixed in {', '.join(v.get('fix_versions', [])) or 'no release yet'})"
        for d in deps
        for v in d.get("vulns", [])
    ]
    skipped = [d for d in deps if "skip_reason" in d]
    if found:
        return EXIT_VULNERABLE, [*found, f"audit: FAILED: {len(found)} known vulnerabilities"]
    if not skipped:
        return EXIT_PASSED, [f"audit: {len(deps)} dependencies, no known vulnerability"]
    lines = [
        f"audit: NOT AUDITED: the advisory service answered for {len(deps) - len(skipped)} of "
        f"{len(deps)} dependencies; e.g. {skipped[0]['skip_reason']}",
        "audit: no vulnerability is known, but that is not a clean audit; run "
        "`make audit` where the advisory service is reachable",
    ]
    return (EXIT_NOT_AUDITED if required else EXIT_PASSED), lines


def main(argv: list[str]) -> int:
    report = json.loads(Path(argv[1]).read_text())
    required = os.environ.get("TIKK_AUDIT_REQUIRED", "").strip() not in ("", "0", "false")
    code, lines = decide(report, required)
    for line in lines:
        print(line, file=sys.stderr if code else sys.stdout)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
