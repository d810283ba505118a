#!/usr/bin/env bash
# Audits the installed dependencies (the environment of $PY, by default the checkout's .venv)
# for known vulnerabilities with pip-audit. The run fails on a known vulnerability, on an
# error of pip-audit and at the time limit. Dependencies the advisory service could not look
# up are reported as NOT AUDITED, loudly, and fail the run only with TIKK_AUDIT_REQUIRED=1
# (see devtools/audit_report.py for why). tikk itself (installed editable) is not audited,
# only what it depends on.
#
# To accept one advisory, add a line "<advisory id> <why it does not affect tikk>" to
# .pip-audit-ignore; a line without a reason fails the run, and every ignored advisory is
# printed with its reason on each run, so it is reviewed rather than forgotten.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
IGNORE_FILE=${AUDIT_IGNORE_FILE:-.pip-audit-ignore}
ignores=()
if [ -f "$IGNORE_FILE" ]; then
  while read -r id reason; do
    case "$id" in '' | '#'*) continue ;; esac
    if [ -z "$reason" ]; then
      echo "audit: $IGNORE_FILE: advisory $id is ignored without a reason; say why" >&2
      exit 1
    fi
    echo "audit: ignoring $id: $reason"
    ignores+=(--ignore-vuln "$id")
  done <"$IGNORE_FILE"
fi
report=$(mktemp)
trap 'rm -f "$report"' EXIT
timeout "${AUDIT_TIMEOUT_S:-300}" "$PY" -m pip_audit --skip-editable --progress-spinner off \
  --format json --output "$report" "${ignores[@]}"
rc=$?
if [ "$rc" -le 1 ] && [ -s "$report" ]; then
  # pip-audit exits 1 on findings too; the report says which, and what was not looked up.
  "$PY" -m devtools.audit_report "$report"
  exit $?
fi
if [ "$rc" -ne 0 ]; then
  if [ "$rc" -eq 124 ]; then
    echo "audit: pip-audit did not finish within ${AUDIT_TIMEOUT_S:-300} s" >&2
  fi
  echo "audit: FAILED (exit $rc): pip-audit could not audit the dependencies (see above)" >&2
  exit 1
fi
echo "audit: FAILED: pip-audit wrote no report" >&2
exit 1
