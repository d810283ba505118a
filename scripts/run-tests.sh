#!/usr/bin/env bash
# Runs the whole test suite. A run that collected no test is a failure, not a pass.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
"$PY" -m pytest -q -p no:cacheprovider "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "run-tests: pytest collected no tests; treating that as a failure" >&2
  exit 1
fi
exit "$rc"
