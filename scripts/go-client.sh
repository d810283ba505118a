#!/usr/bin/env bash
# The Go client of tikk (clients/go): its pinned tools, its generated stubs and its build.
#
#   scripts/go-client.sh tools             protoc-gen-go, protoc-gen-go-grpc and grpcurl built
#                                          into .tools/bin at pinned versions (once: a stamp
#                                          file says which version is there)
#   scripts/go-client.sh generate [OUTDIR] the Go stubs of proto/tikk/v1 into clients/go/tikkv1
#                                          (or OUTDIR)
#   scripts/go-client.sh check             regenerate into a scratch folder and fail if the
#                                          committed stubs differ
#   scripts/go-client.sh test              gofmt, go vet, go build and the unit tests of the module
#                                          (the tests against a real server skip without
#                                          TIKK_ADDR; tests/e2e/test_go_client.py runs them)
#
# Everything comes from package registries: the tools are Go modules built with the Go of this
# machine (/usr/local/go or on the PATH); protoc is the one grpcio-tools ships (the project's
# .venv, or $PYTHON). The protos have no go_package option (the wire and the other stubs stay
# as they are), so the Go import path of each file is given to the plugins with M options.
set -euo pipefail
cd "$(dirname "$0")/.."

PROTOBUF_MODULE=google.golang.org/protobuf
PROTOBUF_VERSION=v1.36.12
GRPC_GEN_MODULE=google.golang.org/grpc/cmd/protoc-gen-go-grpc
GRPC_GEN_VERSION=v1.6.2
GRPCURL_MODULE=github.com/fullstorydev/grpcurl
GRPCURL_VERSION=v1.9.4

# The Go package of the stubs, inside the module of clients/go.
MODULE=github.com/tikk-scheduler/tikk/clients/go
STUBS_DIR=clients/go/tikkv1
STUBS_IMPORT=$MODULE/tikkv1

export PATH="/usr/local/go/bin:$PATH"
# The pinned Go toolchain of this machine, no cgo (no C compiler needed); GOFLAGS keeps the
# module cache deletable.
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-modcacherw
TOOLS="$PWD/.tools"
BIN="$TOOLS/bin"
PY=${PYTHON:-.venv/bin/python}

need_go() {
  command -v go >/dev/null || { echo "go-client: no go on the PATH (expected /usr/local/go/bin/go)" >&2; exit 2; }
}

# `go install` of a tool at its pinned version, unless its stamp says that build is there.
install_tool() {
  local name=$1 package=$2 version=$3
  local stamp="$BIN/.$name-$version"
  if [ -x "$BIN/$name" ] && [ -f "$stamp" ]; then
    return
  fi
  echo "== building $name $version"
  local began=$SECONDS
  GOBIN="$BIN" timeout 1800 go install "$package@$version"
  rm -f "$BIN/.$name-"*
  : > "$stamp"
  echo "$name built in $((SECONDS - began)) s"
}

tools() {
  need_go
  mkdir -p "$BIN"
  install_tool protoc-gen-go "$PROTOBUF_MODULE/cmd/protoc-gen-go" "$PROTOBUF_VERSION"
  install_tool protoc-gen-go-grpc "$GRPC_GEN_MODULE" "$GRPC_GEN_VERSION"
  install_tool grpcurl "$GRPCURL_MODULE/cmd/grpcurl" "$GRPCURL_VERSION"
}

generate() {
  local out=${1:-$STUBS_DIR}
  for tool in protoc-gen-go protoc-gen-go-grpc; do
    [ -x "$BIN/$tool" ] || { echo "go-client: $BIN/$tool is missing (scripts/go-client.sh tools)" >&2; exit 2; }
  done
  timeout 60 "$PY" -c 'import grpc_tools' 2>/dev/null ||
    { echo "go-client: $PY with grpcio-tools is needed (make venv, or PYTHON=...)" >&2; exit 2; }
  local protos=(proto/tikk/v1/*.proto) maps=() file
  for file in "${protos[@]}"; do
    file=${file#proto/}
    maps+=("--go_opt=M$file=$STUBS_IMPORT" "--go-grpc_opt=M$file=$STUBS_IMPORT")
  done
  local scratch
  scratch=$(mktemp -d)
  # paths=source_relative would follow the proto folders (tikk/v1/); the files are written
  # under their import path instead and moved into OUTDIR, which holds nothing else.
  timeout 300 "$PY" -m grpc_tools.protoc -I proto \
    --plugin=protoc-gen-go="$BIN/protoc-gen-go" \
    --plugin=protoc-gen-go-grpc="$BIN/protoc-gen-go-grpc" \
    --go_out="$scratch" --go_opt=module="$MODULE" \
    --go-grpc_out="$scratch" --go-grpc_opt=module="$MODULE" \
    "${maps[@]}" "${protos[@]}"
  mkdir -p "$out"
  rm -f "$out"/*.pb.go
  mv "$scratch"/tikkv1/*.pb.go "$out"/
  rm -rf "$scratch"
}

check() {
  local scratch
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' RETURN
  generate "$scratch/tikkv1"
  if ! diff -r "$scratch/tikkv1" "$STUBS_DIR"; then
    echo "go-client: $STUBS_DIR differs from the protos: run scripts/go-client.sh generate" >&2
    return 1
  fi
  echo "go-client: $STUBS_DIR matches the protos"
}

test_module() {
  need_go
  cd clients/go
  local unformatted
  unformatted=$(timeout 120 gofmt -l .)
  [ -z "$unformatted" ] || { echo "go-client: not gofmt-formatted: $unformatted" >&2; exit 1; }
  timeout 600 go vet ./...
  timeout 600 go build ./...
  timeout 600 go test -count=1 ./...
}

case "${1:-}" in
  tools) tools ;;
  generate) generate "${2:-}" ;;
  check) check ;;
  test) test_module ;;
  *)
    echo "usage: scripts/go-client.sh tools|generate [OUTDIR]|check|test" >&2
    exit 2
    ;;
esac
