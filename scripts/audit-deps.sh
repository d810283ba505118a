#!/usr/bin/env bash
# Audits the installed dependencies (the environment of $PY, by default the checkout's .venv)
# for known vulnerabilities with pip-audit. The run fails on a known vulnerability, and it
# also fails when the audit could not be done (the advisory service unreachable, a package it
# could not look up, the time limit reached): an audit that did not happen must not read as
# a pass. tikk itself (installed editable) is not audited, only what it depends on.
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
# --strict: a dependency that could not be looked up fails the audit instead of being skipped.
timeout "${AUDIT_TIMEOUT_S:-300}" "$PY" -m pip_audit --strict --skip-editable \
  --progress-spinner off "${ignores[@]}"
rc=$?
if [ "$rc" -ne 0 ]; then
  if [ "$rc" -eq 124 ]; then
    echo "audit: pip-audit did not finish within ${AUDIT_TIMEOUT_S:-300} s" >&2
  fi
  echo "audit: FAILED (exit $rc): a known vulnerability is listed above, or the audit could" \
    "not be done; either way the dependencies are not known to be safe" >&2
  exit 1
fi
