#!/usr/bin/env bash
# The TypeScript client (clients/typescript): its npm dependencies, its generated stubs and its
# tests.
#
#   scripts/ts-client.sh deps            npm ci from the committed lock (skipped when
#                                        node_modules was installed from this very lock)
#   scripts/ts-client.sh generate [DIR]  the stubs of proto/tikk/v1 into DIR
#                                        (default: clients/typescript/src/gen, replaced whole)
#   scripts/ts-client.sh check           regenerate into a scratch folder and fail on any
#                                        difference from the committed stubs
#   scripts/ts-client.sh test [ARGS]     tsc build, then `node --test ARGS` on the built tests
#                                        (they skip without TIKK_ADDR; tests/e2e/test_ts_client.py
#                                        starts the servers and sets it)
#
# The generator is ts-proto, pinned in package-lock.json; protoc is grpcio-tools' (pinned in
# pyproject.toml), so the version lines of the stubs' headers are fixed too.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PKG="$ROOT/clients/typescript"
PY="${PY:-$ROOT/.venv/bin/python}"
GEN="$PKG/src/gen"
STAMP="$PKG/node_modules/.tikk-lock.sha256"
# ts-proto's options: grpc-js service clients, Node Buffers for bytes, default imports.
TS_PROTO_OPT="outputServices=grpc-js,env=node,esModuleInterop=true"
NPM_CI_TIMEOUT="${NPM_CI_TIMEOUT:-300}"
TEST_TIMEOUT="${TS_TEST_TIMEOUT:-600}"

# A scratch folder of this run, removed at its end.
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

die() {
  echo "ts-client: $*" >&2
  exit 1
}

lock_sum() {
  sha256sum "$PKG/package-lock.json" | cut -d' ' -f1
}

need_deps() {
  [[ -x "$PKG/node_modules/.bin/tsc" && -x "$PKG/node_modules/.bin/protoc-gen-ts_proto" ]] ||
    die "clients/typescript/node_modules is missing; run: scripts/ts-client.sh deps"
}

deps() {
  command -v npm >/dev/null || die "npm is not installed (Node 20 and npm are needed)"
  if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$(lock_sum)" ]]; then
    echo "ts-client: node_modules matches package-lock.json; npm ci skipped"
    return
  fi
  # No install scripts: none of the dependencies needs one (protobufjs' only prints a notice).
  (cd "$PKG" && timeout "$NPM_CI_TIMEOUT" npm ci --ignore-scripts --no-audit --no-fund) ||
    die "npm ci failed or took over ${NPM_CI_TIMEOUT}s"
  lock_sum >"$STAMP"
}

generate() {
  local out="${1:-$GEN}"
  need_deps
  [[ -x "$PY" ]] || die "$PY is missing; run: make venv"
  if [[ "$out" != "$GEN" && -e "$out" && -n "$(ls -A "$out")" ]]; then
    die "$out is not empty; give a new or empty folder"
  fi
  local scratch="$WORK/protoc-out"
  rm -rf "$scratch" && mkdir -p "$scratch"
  (cd "$ROOT" && timeout 120 "$PY" -m grpc_tools.protoc -I proto \
    --plugin=protoc-gen-ts_proto="$PKG/node_modules/.bin/protoc-gen-ts_proto" \
    --ts_proto_out="$scratch" --ts_proto_opt="$TS_PROTO_OPT" proto/tikk/v1/*.proto)
  rm -rf "$out"
  mkdir -p "$(dirname "$out")"
  cp -r "$scratch" "$out"
}

check() {
  generate "$WORK/gen"
  if ! diff -r "$WORK/gen" "$GEN"; then
    die "the committed stubs under clients/typescript/src/gen differ from the protos; run: scripts/ts-client.sh generate"
  fi
  echo "ts-client: the generated stubs are up to date"
}

run_tests() {
  need_deps
  (cd "$PKG" && rm -rf dist && timeout 300 node_modules/.bin/tsc -p tsconfig.json) ||
    die "tsc failed"
  local files=("$PKG"/dist/test/*.test.js)
  [[ -e "${files[0]}" ]] || die "no built tests under clients/typescript/dist/test"
  (cd "$PKG" && timeout "$TEST_TIMEOUT" node --test "$@" "${files[@]}")
}

cmd="${1:-}"
shift || true
case "$cmd" in
  deps) deps ;;
  generate) generate "$@" ;;
  check) check ;;
  test) run_tests "$@" ;;
  *) die "usage: scripts/ts-client.sh deps | generate [OUTDIR] | check | test [NODE_TEST_ARGS...]" ;;
esac
