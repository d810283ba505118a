#!/usr/bin/env bash
# `make test`: the checks, the whole test suite on the real stack, the deployment files'
# checks and the dependency audit, failing at the first that fails.
#
# The deployment checks' Go tools (helm, kubeconform, promtool) are most of a fresh machine's
# build time, and nothing before the deployment checks needs them: they are built from the
# start at the lowest CPU priority (nice 19), on the cycles the rest leaves idle (downloads,
# JVMs starting, tests waiting on the services), and waited for after the tests; the few tests
# that run a tool wait for it (tests/deploy_tools.py).
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p .tools
build_log=.tools/deploy-tools.log
setsid nice -n 19 bash scripts/deploy-check.sh tools > "$build_log" 2>&1 &
tools=$!
# The tests that run a tool wait while this names a live process (tests/deploy_tools.py).
echo "$tools" > .tools/.building
trap 'kill -- -"$tools" 2>/dev/null || true; rm -f .tools/.building' EXIT

step() {
  "$@" && return 0
  local rc=$?
  echo "make test: '$*' failed (exit $rc)" >&2
  exit "$rc"
}

step make --no-print-directory check browser stack-up
step env CI="${CI:-true}" bash scripts/run-tests.sh
if ! wait "$tools"; then
  cat "$build_log" >&2
  echo "make test: the deployment checks' tools did not build" >&2
  exit 1
fi
cat "$build_log"
step bash scripts/deploy-check.sh
step bash scripts/audit-deps.sh
