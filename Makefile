# The two set-up commands of the README: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PROTOS := $(wildcard proto/tikk/v1/*.proto)

.PHONY: demo test check lint proto proto-check venv stack-up stack-down audit browser deploy-check clients-deps clients-check image

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

venv: $(VENV)/.installed

demo: venv
	$(PY) examples/demo.py

# The Python stubs, and the Go and TypeScript clients' (clients/go, clients/typescript).
proto: venv clients-deps
	$(PY) -m grpc_tools.protoc -I proto --python_out=. --pyi_out=. --grpc_python_out=. $(PROTOS)
	bash scripts/go-client.sh generate
	bash scripts/ts-client.sh generate

# Regenerates the stubs into a scratch folder and fails if they differ from the committed ones.
proto-check: venv clients-deps
	rm -rf .proto-check && mkdir -p .proto-check
	$(PY) -m grpc_tools.protoc -I proto --python_out=.proto-check --pyi_out=.proto-check --grpc_python_out=.proto-check $(PROTOS)
	diff -r -x __init__.py -x __pycache__ -x '*.typed' .proto-check/tikk/v1 tikk/v1
	rm -rf .proto-check
	bash scripts/go-client.sh check
	bash scripts/ts-client.sh check

# The other languages' toolchains: protoc-gen-go, protoc-gen-go-grpc and grpcurl built into
# .tools/bin (once), the TypeScript client's npm packages (npm ci, once per lock file).
clients-deps: venv
	bash scripts/go-client.sh tools
	bash scripts/ts-client.sh deps

# gofmt, vet and the unit tests of the Go client and the Go worker, and the TypeScript
# client's compile (its tests without a server skip; the tests against real servers run in
# pytest: tests/e2e/test_go_client.py, test_go_worker.py, test_ts_client.py).
clients-check: clients-deps
	bash scripts/go-client.sh test
	bash scripts/go-worker.sh check
	bash scripts/ts-client.sh test

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

check: lint proto-check clients-check

# Cassandra, Kafka and ZooKeeper as local processes (needs JDK 17 and Maven; says so if not).
stack-up: venv
	$(PY) -m devtools stack up

stack-down: venv
	$(PY) -m devtools stack down

# Known vulnerabilities in the installed dependencies (pip-audit); fails if it cannot audit.
audit: venv
	bash scripts/audit-deps.sh

# The browser the console's tests drive (Debian's chromium; installed when missing, as root).
browser:
	bash scripts/browser.sh

# helm and kubeconform built into .tools/ (once), then the chart and compose checks.
deploy-check: venv
	bash scripts/deploy-check.sh

# The container image built with buildah and started with podman (Debian's, installed when
# missing; as root) on a Python base made with debootstrap: no Docker engine or registry.
# Minutes, not part of `make test`: run by hand.
image:
	bash scripts/build-image.sh

# check, browser, stack-up, the tests, deploy-check, audit (scripts/test.sh): the deployment
# checks' tools build at the lowest CPU priority meanwhile. The audit runs after the tests, so
# a run reports both the tests and the dependencies.
test: venv
	bash scripts/test.sh
