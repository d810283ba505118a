#!/usr/bin/env bash
# Runs the whole test suite and prints why any test was skipped, and the 30 slowest tests (where
# a run's time goes). A run that collected no test is a failure, not a pass; under CI (CI set
# to anything but empty, 0 or false) so is a skip, since a skipped test there means a service
# or tool the suite needs was missing.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
report=$(mktemp)
trap 'rm -f "$report"' EXIT
"$PY" -m pytest -q -rs -p no:cacheprovider --durations=30 --junitxml="$report" "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "run-tests: pytest collected no tests; treating that as a failure" >&2
  exit 1
fi
ci=$(printf '%s' "${CI:-}" | tr '[:upper:]' '[:lower:]')
if [ "$rc" -eq 0 ] && [ -n "$ci" ] && [ "$ci" != 0 ] && [ "$ci" != false ]; then
  skipped=$("$PY" -c 'import sys, xml.etree.ElementTree as et
root = et.parse(sys.argv[1]).getroot()
print(sum(int(s.get("skipped", 0)) for s in root.iter("testsuite")))' "$report")
  if [ "$skipped" -gt 0 ]; then
    echo "run-tests: $skipped test(s) skipped under CI (reasons above); treating that as a failure" >&2
    exit 1
  fi
fi
exit "$rc"
