#!/usr/bin/env bash
# Checks the deployment files: the alert rules (deploy/prometheus) with promtool's check and
# unit tests; the Helm chart (deploy/helm/tikk) with `helm lint --strict`, and
# its manifests, rendered with the default values, with the other branches of the values and
# with the chart's values for the replicated deployment (values-replicated.yaml), against the
# Kubernetes API's JSON schemas with kubeconform -strict; the compose stack
# (deploy/compose) parsed, with the services it must run, and its shell scripts' syntax.
#
# Everything comes from package registries, nothing from a web site: helm, kubeconform and
# promtool are Go programs built into .tools/bin at pinned versions (Go at /usr/local/go or on the PATH).
# kubeconform's default schema location is a web site, so the schemas come from packages
# instead: Kubernetes' from the kubernetes-validate package (PyPI), which ships them per
# Kubernetes version; the ServiceMonitor's from the CRD in the prometheus-operator Go module,
# converted by kubeconform's own openapi2jsonschema.py. All of it is kept in .tools/ and made
# again only when a pinned version changes; the checks themselves run offline.
#
# `deploy-check.sh tools` only builds the tools and fetches the schemas (what `make test` runs
# at the lowest CPU priority beside the tests, scripts/test.sh); without it, the checks follow.
#
# Needs the project's .venv (`make venv`: pip, PyYAML) or $PYTHON naming a python with both.
set -euo pipefail
cd "$(dirname "$0")/.."

HELM_MODULE=helm.sh/helm/v3
HELM_VERSION=v3.21.4
KUBECONFORM_MODULE=github.com/yannh/kubeconform
KUBECONFORM_VERSION=v0.8.0
SCHEMAS_PACKAGE=kubernetes-validate
SCHEMAS_VERSION=1.37.0
# The oldest Kubernetes the chart allows (Chart.yaml kubeVersion) and the newest the schemas
# cover: a manifest valid on both uses no field added or removed between them.
KUBE_VERSIONS=(1.25.0 1.37.0)
OPERATOR_MODULE=github.com/prometheus-operator/prometheus-operator
OPERATOR_VERSION=v0.85.0
# promtool, of Prometheus 3 (its Go module is numbered v0.3xx), checks and unit-tests the
# alert rules of deploy/prometheus.
PROMETHEUS_MODULE=github.com/prometheus/prometheus
PROMETHEUS_VERSION=v0.316.0

export PATH="/usr/local/go/bin:$PATH"
# The pinned Go toolchain of this machine, no cgo (no C compiler needed), and the tools' own
# folder; GOFLAGS keeps the module cache deletable.
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-modcacherw
TOOLS="$PWD/.tools"
BIN="$TOOLS/bin"
SCHEMAS="$TOOLS/schemas"
PY=${PYTHON:-.venv/bin/python}
CHART=deploy/helm/tikk

say() { printf '\n== %s\n' "$*"; }

command -v go >/dev/null || { echo "deploy-check: no go on the PATH (expected /usr/local/go/bin/go)" >&2; exit 2; }
if ! timeout 60 "$PY" -c 'import pip, yaml' 2>/dev/null; then
  echo "deploy-check: $PY with pip and PyYAML is needed (make venv, or PYTHON=...)" >&2
  exit 2
fi
case "$PY" in /*) ;; *) PY="$PWD/$PY" ;; esac
mkdir -p "$BIN"

# `go install` of a tool at its pinned version (and link flags), unless its stamp says that
# build is there already.
install_tool() {
  local name=$1 package=$2 version=$3 ldflags=${4:-}
  local stamp="$BIN/.$name-$version"
  if [ -x "$BIN/$name" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$ldflags" ]; then
    return
  fi
  say "building $name $version"
  local began=$SECONDS
  GOBIN="$BIN" timeout 1800 go install -ldflags "$ldflags" "$package@$version"
  rm -f "$BIN/.$name-"*
  printf '%s' "$ldflags" > "$stamp"
  echo "$name built in $((SECONDS - began)) s"
}

# The link flags of helm's own release builds (its Makefile): the version, and the Kubernetes
# version of the client-go it is built with, which `helm template` and `helm lint` assume
# (without them, Kubernetes 1.20, which the chart's kubeVersion refuses).
helm_ldflags() {
  local go_mod minor
  go_mod=$(timeout 600 go mod download -json "$HELM_MODULE@$HELM_VERSION" |
    timeout 60 "$PY" -c 'import json, sys; print(json.load(sys.stdin)["GoMod"])')
  minor=$(sed -n 's|^[[:space:]]*k8s.io/client-go v0\.\([0-9]*\)\..*|\1|p' "$go_mod")
  [ -n "$minor" ] || { echo "deploy-check: no k8s.io/client-go in $go_mod" >&2; exit 1; }
  local flags="-X $HELM_MODULE/internal/version.version=$HELM_VERSION"
  for package in pkg/chartutil pkg/lint/rules; do
    flags+=" -X $HELM_MODULE/$package.k8sVersionMajor=1 -X $HELM_MODULE/$package.k8sVersionMinor=$minor"
  done
  echo "$flags"
}

# The folder of a Go module at a version in the module cache (downloaded if missing).
module_dir() {
  timeout 600 go mod download -json "$1@$2" |
    timeout 60 "$PY" -c 'import json, sys; d = json.load(sys.stdin); sys.exit(d.get("Error")) if d.get("Error") else print(d["Dir"])'
}

kube_schemas() {
  local stamp
  stamp="$SCHEMAS/.$SCHEMAS_PACKAGE-$SCHEMAS_VERSION-$(IFS=_; echo "${KUBE_VERSIONS[*]}")"
  [ -f "$stamp" ] && return
  say "Kubernetes schemas from $SCHEMAS_PACKAGE $SCHEMAS_VERSION"
  rm -rf "$SCHEMAS/kubernetes" "$SCHEMAS/wheel" && mkdir -p "$SCHEMAS/wheel"
  timeout 600 "$PY" -m pip download --quiet --disable-pip-version-check --no-deps \
    --only-binary :all: -d "$SCHEMAS/wheel" "$SCHEMAS_PACKAGE==$SCHEMAS_VERSION"
  # The package's schemas refer to their shared definitions by an absolute URL of a web site
  # ($id https://kubernetes.io/api/...): rewritten as a file beside them, so kubeconform
  # reads every reference from disk.
  timeout 300 "$PY" - "$SCHEMAS" "${KUBE_VERSIONS[@]}" <<'PYTHON'
import json
import sys
import zipfile
from pathlib import Path

out, versions = Path(sys.argv[1]), sys.argv[2:]
(wheel,) = (out / "wheel").glob("*.whl")
with zipfile.ZipFile(wheel) as archive:
    for version in versions:
        folder = f"v{version}-local-strict"
        prefix = f"kubernetes_validate/kubernetes-json-schema/{folder}/"
        names = [n for n in archive.namelist() if n.startswith(prefix) and n.endswith(".json")]
        if not names:
            sys.exit(f"{wheel.name} has no schemas of Kubernetes {version}")
        target = out / "kubernetes" / folder
        target.mkdir(parents=True)
        for name in names:
            text = archive.read(name).decode()
            schema = json.loads(text.replace('"/api/_definitions.json#', '"_definitions.json#'))
            schema.pop("$id", None)
            (target / name[len(prefix):]).write_text(json.dumps(schema))
        print(f"Kubernetes {version}: {len(names)} schemas")
PYTHON
  rm -rf "$SCHEMAS/wheel"
  touch "$stamp"
}

crd_schemas() {
  local stamp="$SCHEMAS/.crds-$OPERATOR_VERSION-$KUBECONFORM_VERSION"
  [ -f "$stamp" ] && return
  say "ServiceMonitor schema from $OPERATOR_MODULE $OPERATOR_VERSION"
  local operator converter out="$SCHEMAS/crds/monitoring.coreos.com"
  operator=$(module_dir "$OPERATOR_MODULE" "$OPERATOR_VERSION")
  converter=$(module_dir "$KUBECONFORM_MODULE" "$KUBECONFORM_VERSION")/scripts/openapi2jsonschema.py
  rm -rf "$SCHEMAS/crds" && mkdir -p "$out"
  # -strict for a custom resource: no property its CRD does not declare, at the root too.
  (cd "$out" && FILENAME_FORMAT='{kind}_{version}' DENY_ROOT_ADDITIONAL_PROPERTIES=1 \
    timeout 120 "$PY" "$converter" \
    "$operator/example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml")
  touch "$stamp"
}

helm_flags=$(helm_ldflags)
install_tool helm "$HELM_MODULE/cmd/helm" "$HELM_VERSION" "$helm_flags"
install_tool kubeconform "$KUBECONFORM_MODULE/cmd/kubeconform" "$KUBECONFORM_VERSION"
install_tool promtool "$PROMETHEUS_MODULE/cmd/promtool" "$PROMETHEUS_VERSION"
kube_schemas
crd_schemas
if [ "${1:-}" = tools ]; then
  say "deploy-check: tools ready"
  exit 0
fi

# The values that take the templates' other branches: Secrets and a certificate of the
# operator's and a CA of its own for the backends; two workers, server-wide settings, no TLS
# towards the backends and no ServiceMonitor.
VALUES="$TOOLS/values"
mkdir -p "$VALUES"
cat > "$VALUES/existing-secrets.yaml" <<'YAML'
secrets:
  backends: {existingSecret: tikk-backends}
  worker: {existingSecret: tikk-workers}
  scrape: {existingSecret: tikk-scrape}
tls: {existingSecret: tikk-tls}
backends:
  tls: {enabled: true, customCA: true}
YAML
cat > "$VALUES/two-workers.yaml" <<'YAML'
workers:
  - {name: demo, target: "examples.demo_worker:worker", queues: [demo]}
  - {name: mail, target: "app.mail:worker", queues: [email, sms], replicas: 3,
     image: {repository: registry.example/mail-worker, tag: "1.2.0"}}
secrets:
  worker: {tokens: {demo: a, mail: b}}
extraConfig: |
  [limits]
  max_payload_bytes = 65536
backends:
  tls: {enabled: false}
serviceMonitor: {enabled: false}
YAML
# The replicated deployment the chart ships values for: three nodes of each backend, three
# servers and dispatchers kept apart.
VARIANTS=("" "-f $VALUES/existing-secrets.yaml" "-f $VALUES/two-workers.yaml"
  "-f $CHART/values-replicated.yaml")

say "helm lint --strict $CHART"
for variant in "${VARIANTS[@]}"; do
  # shellcheck disable=SC2086 # each variant is a list of helm options
  timeout 120 "$BIN/helm" lint --strict $variant "$CHART"
done

say "kubeconform -strict of the rendered chart (Kubernetes ${KUBE_VERSIONS[*]})"
for version in "${KUBE_VERSIONS[@]}"; do
  for variant in "${VARIANTS[@]}"; do
    # shellcheck disable=SC2086
    timeout 120 "$BIN/helm" template tikk "$CHART" --namespace tikk --kube-version "$version" $variant |
      timeout 120 "$BIN/kubeconform" -strict -summary -kubernetes-version "$version" \
        -schema-location "$SCHEMAS/kubernetes/{{ .NormalizedKubernetesVersion }}-local{{ .StrictSuffix }}/{{ .ResourceKind }}{{ .KindSuffix }}.json" \
        -schema-location "$SCHEMAS/crds/{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json"
  done
done

say "promtool: the alert rules (deploy/prometheus)"
# check: every rule parses and its expression and templates are valid; test: each alert
# fires on the series it is about, with the labels and text expected, and not on a healthy
# cluster (tikk-alerts.test.yml).
(cd deploy/prometheus && timeout 120 "$BIN/promtool" check rules tikk-alerts.yml \
  && timeout 120 "$BIN/promtool" test rules tikk-alerts.test.yml)

say "compose stack (deploy/compose)"
for script in deploy/compose/*.sh; do
  timeout 30 bash -n "$script"
done
timeout 60 "$PY" - <<'PYTHON'
import sys
from pathlib import Path

import yaml

compose = yaml.safe_load(Path("deploy/compose/compose.yaml").read_text())
expected = {"zookeeper", "kafka", "cassandra", "cassandra-roles", "migrate", "credentials",
            "server", "dispatcher-1", "dispatcher-2", "worker", "prometheus"}
services = set(compose["services"])
if missing := expected - services:
    sys.exit(f"compose.yaml lacks the services {sorted(missing)}")
for name, service in compose["services"].items():
    for secret in service.get("secrets", []):
        if secret not in compose["secrets"]:
            sys.exit(f"compose.yaml: {name} uses the undefined secret {secret}")
print(f"compose.yaml: {len(services)} services, {len(compose['secrets'])} secrets")
PYTHON

say "deploy-check: all passed"
