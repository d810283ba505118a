#!/usr/bin/env bash
# The example Go worker (clients/go-worker, its own Go module; an example, not published).
#
#   scripts/go-worker.sh build OUT   go build of clients/go-worker into the file OUT
#   scripts/go-worker.sh check       gofmt, go vet and the unit tests of the module (the run
#                                    against a real server is tests/e2e/test_go_worker.py)
#
# Its stubs of proto/tikk/v1 come from clients/go (a replace directive in its go.mod), its
# other dependencies from the Go module proxy at the versions pinned in go.mod / go.sum.
# Uses the Go of this machine (/usr/local/go or on the PATH). Every go command is bounded by
# $GO_WORKER_TIMEOUT seconds (default 600: the first build downloads and compiles gRPC and
# franz-go; later ones take seconds).
set -euo pipefail
cd "$(dirname "$0")/.."

export PATH="/usr/local/go/bin:$PATH"
# The pinned Go toolchain of this machine, no cgo (no C compiler needed); GOFLAGS keeps the
# module cache deletable.
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-modcacherw
LIMIT=${GO_WORKER_TIMEOUT:-600}
MODULE_DIR=clients/go-worker

usage() {
  echo "usage: scripts/go-worker.sh build OUT | check" >&2
  exit 2
}

command -v go >/dev/null || { echo "go-worker: no go on the PATH (expected /usr/local/go/bin/go)" >&2; exit 2; }

case "${1:-}" in
  build)
    [ $# -eq 2 ] || usage
    out=$2
    case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
    began=$SECONDS
    (cd "$MODULE_DIR" && timeout "$LIMIT" go build -trimpath -o "$out" .)
    echo "go-worker built in $((SECONDS - began)) s: $out"
    ;;
  check)
    unformatted=$(cd "$MODULE_DIR" && gofmt -l .)
    if [ -n "$unformatted" ]; then
      echo "go-worker: not gofmt'ed: $unformatted" >&2
      exit 1
    fi
    (cd "$MODULE_DIR" && timeout "$LIMIT" go vet ./... && timeout "$LIMIT" go test ./...)
    echo "go-worker: gofmt, go vet and go test clean"
    ;;
  *)
    usage
    ;;
esac
