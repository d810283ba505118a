"""The files an operator deploys tikk with, read as their tools would: the Dockerfile (one
image, run as an unprivileged user, whose entry command is a real ``tikk`` command line), the
compose stack (every part of the production stack, every password a secret) and the Helm chart
(its values and templates). Each ``tikk`` command line they run is handed to tikk's own parser
with ``--help`` appended, outside any container, and every flag it uses must be one that
command knows. With the tools of ``scripts/deploy-check.sh`` built into ``.tools/``, the chart
is also linted and its rendered manifests validated against the Kubernetes schemas here."""

from __future__ import annotations

import functools
import importlib
import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy_tools import BIN, SCHEMAS, built
from tikk.credentials import Grant
from tikk.queue_contract import KafkaQueueUrl
from tikk.urls import BackendUrl

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE_DIR = ROOT / "deploy" / "compose"
CHART = ROOT / "deploy" / "helm" / "tikk"
HELM, KUBECONFORM = BIN / "helm", BIN / "kubeconform"
# The unprivileged user the image runs as, and the chart's pods with it.
TIKK_UID = 10001
# The services of the compose stack: the backends, tikk's one-shot steps and processes, and
# Prometheus.
COMPOSE_SERVICES = {
    "zookeeper", "kafka", "cassandra", "cassandra-roles", "migrate", "credentials", "server",
    "dispatcher-1", "dispatcher-2", "worker", "prometheus",
}  # fmt: skip
_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
_TEMPLATE = re.compile(r"\{\{.*?\}\}")


# --- tikk's own parser ---


@functools.cache
def tikk_help(*command: str) -> subprocess.CompletedProcess[str]:
    """``tikk COMMAND --help`` through tikk's own parser (``python -m server.cli``): it exits
    0 only if everything before ``--help`` parses (a sub-command, an option value's type)."""
    return subprocess.run(
        [sys.executable, "-m", "server.cli", *command, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def unknown_flags(command: list[str]) -> set[str]:
    """The flags of ``command`` (a tikk command line) that its sub-command (the words before
    the first flag: ``server``, ``auth create``) does not know."""
    words = next((command[:i] for i, arg in enumerate(command) if arg.startswith("--")), command)
    known = set(_FLAG.findall(tikk_help(*words).stdout))
    used = {arg.split("=", 1)[0] for arg in command if arg.startswith("--")}
    return used - known


def assert_tikk_accepts(command: list[str]) -> None:
    done = tikk_help(*command)
    assert done.returncode == 0, f"tikk {shlex.join(command)} --help: {done.stderr}"
    assert unknown_flags(command) == set(), shlex.join(command)


# --- the Dockerfile ---


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments
    dropped."""
    logical, pending = [], ""
    for line in DOCKERFILE.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        logical.append(pending)
        pending = ""
    return [(text.split(None, 1)[0].upper(), text.split(None, 1)[1].strip()) for text in logical]


def final_stage() -> list[tuple[str, str]]:
    instructions = dockerfile()
    start = max(i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM")
    return instructions[start:]


def instruction(keyword: str) -> str:
    (found,) = [args for k, args in final_stage() if k == keyword]
    return found


def build_args() -> dict[str, str]:
    pairs = [args.partition("=") for k, args in dockerfile() if k == "ARG" and "=" in args]
    return {name: value for name, _, value in pairs}


def test_the_image_runs_as_an_unprivileged_user_of_a_fixed_uid() -> None:
    user = instruction("USER")
    assert user == f"{TIKK_UID}:{TIKK_UID}"
    assert build_args()["TIKK_UID"] == str(TIKK_UID)
    assert "--uid" in " ".join(args for k, args in final_stage() if k == "RUN")


def test_every_stage_builds_on_python_3_11_slim() -> None:
    stages = [args for keyword, args in dockerfile() if keyword == "FROM"]
    assert len(stages) == 2  # a build stage, and the runtime it copies the venv into
    assert all(stage.startswith("${PYTHON_IMAGE}") for stage in stages)
    assert build_args()["PYTHON_IMAGE"] == "python:3.11-slim"
    assert any("--from=build" in args for k, args in final_stage() if k == "COPY")


def test_the_image_installs_the_production_extras() -> None:
    extras = set(build_args()["TIKK_EXTRAS"].split(","))
    assert extras == {"cassandra", "kafka", "zookeeper", "otel"}
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert extras <= set(pyproject["project"]["optional-dependencies"])


def test_the_image_s_entry_command_is_a_tikk_command_line() -> None:
    assert json.loads(instruction("ENTRYPOINT")) == ["tikk"]
    command = json.loads(instruction("CMD"))
    assert command[0] == "server"
    assert_tikk_accepts(command)


def test_the_image_exposes_the_api_and_http_ports_and_probes_healthz() -> None:
    assert instruction("EXPOSE").split() == ["7070", "7071"]
    probe = instruction("HEALTHCHECK")
    assert "urllib.request" in probe and "TIKK_HEALTH_URL" in probe
    assert "TIKK_HEALTH_URL=http://127.0.0.1:7071/healthz" in instruction("ENV")
    assert instruction("WORKDIR") == "/var/lib/tikk"


def test_the_build_context_holds_what_the_dockerfile_copies() -> None:
    kept = {line[1:].rstrip("/") for line in dockerignore() if line.startswith("!")}
    copied = [args.split()[:-1] for k, args in dockerfile() if k == "COPY"]
    sources = {src.rstrip("/") for srcs in copied if "--from" not in srcs[0] for src in srcs}
    assert sources <= kept
    assert dockerignore()[0] == "*"  # nothing else reaches the build context


def test_the_image_copies_the_packages_pyproject_installs() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    included = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {pattern.rstrip("*") for pattern in included}
    copied = {args.split()[0] for k, args in dockerfile() if k == "COPY"}
    assert packages <= copied


def dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


# --- the compose stack ---


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((COMPOSE_DIR / "compose.yaml").read_text())
    return loaded


def service(name: str) -> dict[str, Any]:
    found: dict[str, Any] = compose()["services"][name]
    return found


def tikk_commands() -> dict[str, list[str]]:
    """The tikk command line of each compose service that runs one."""
    return {
        name: [str(arg) for arg in s["command"]]
        for name, s in compose()["services"].items()
        if s.get("image") == "tikk:local" and s.get("command") and "entrypoint" not in s
    }


def test_the_compose_stack_runs_every_part_of_the_production_stack() -> None:
    assert set(compose()["services"]) == COMPOSE_SERVICES
    assert set(tikk_commands()) == {
        "migrate", "server", "dispatcher-1", "dispatcher-2", "worker",
    }  # fmt: skip


@pytest.mark.parametrize("name", sorted(tikk_commands()))
def test_each_tikk_command_line_of_the_compose_stack_is_one_tikk_accepts(name: str) -> None:
    assert_tikk_accepts(tikk_commands()[name])


def test_the_backend_images_are_the_versions_the_tests_run_against() -> None:
    poms = {
        "cassandra": ("cassandra", "cassandra-all"),
        "kafka": ("kafka", "kafka_2.13"),
        "zookeeper": ("zookeeper", "zookeeper"),
    }
    for name, (folder, artifact) in poms.items():
        pom = (ROOT / "infra" / folder / "pom.xml").read_text()
        version = re.search(rf"<artifactId>{artifact}</artifactId><version>([^<]+)<", pom)
        assert version is not None
        assert service(name)["image"].rsplit(":", 1)[1] == version.group(1), name


def test_the_server_checks_callers_over_tls_on_every_interface() -> None:
    command = tikk_commands()["server"]
    assert command[0] == "server" and "--auth" in command
    assert command[command.index("--http") + 1] == "0.0.0.0:7071"
    assert command[command.index("--listen") + 1] == "0.0.0.0:7070"
    assert "--tls-cert" in command and "--tls-key" in command and "--insecure" not in command
    assert service("server")["environment"]["TIKK_HEALTH_URL"].startswith("https://")


def test_two_dispatchers_divide_the_shards_through_zookeeper() -> None:
    dispatchers = [c for c in tikk_commands().values() if c[0] == "dispatcher"]
    assert len(dispatchers) == 2
    assert backends("tikk.toml")["ownership"].startswith("zk://tikk@zookeeper:2181/")


def test_the_worker_runs_the_demo_worker_with_its_own_logins_only() -> None:
    command = tikk_commands()["worker"]
    module, _, attr = command[1].partition(":")
    assert command[1] == "examples.demo_worker:worker"
    worker = getattr(importlib.import_module(module), attr)
    assert "worker:demo" in make_tokens_roles() and worker.queues == ["demo"]
    assert set(service("worker")["secrets"]) == {"api-ca", "kafka-worker-password"}
    assert service("worker")["environment"] == {"TIKK_CONFIG": "/etc/tikk/worker.toml"}
    assert set(backends("worker.toml")) == {"queue"}
    assert backends("worker.toml")["queue"].startswith("kafka://tikk-worker@")


def backends(config: str) -> dict[str, str]:
    table: dict[str, str] = tomllib.loads((COMPOSE_DIR / config).read_text())["backends"]
    return table


@pytest.mark.parametrize("config", ["tikk.toml", "worker.toml"])
def test_the_backend_urls_name_a_user_and_a_password_file(config: str, tmp_path: Path) -> None:
    for key, url in backends(config).items():
        assert "password_file=/run/secrets/" in url, key
        secret = re.search(r"password_file=/run/secrets/([\w-]+)", url)
        assert secret is not None and secret.group(1) in compose()["secrets"]
        (tmp_path / secret.group(1)).write_text("pw\n")
        parsed = BackendUrl.parse(key, url.replace("/run/secrets/", f"{tmp_path}/"))
        assert parsed.credentials is not None and parsed.credentials.password == "pw"
        if key == "queue":
            assert parsed.sasl == "SCRAM-SHA-256"
            assert KafkaQueueUrl.from_url(parsed.bare).replication == 1


def test_every_secret_is_a_file_make_secrets_makes() -> None:
    script = (COMPOSE_DIR / "make-secrets.sh").read_text()
    users = re.search(r"for user in ([\w -]+); do", script)
    assert users is not None
    made = {f"{user}.password" for user in users.group(1).split()}
    made |= set(re.findall(r"secrets/([\w.-]+\.pem|[\w.-]+\.key|delivery-keys)\b", script))
    for name, secret in compose()["secrets"].items():
        assert secret["file"].startswith("./secrets/"), name
        assert secret["file"].removeprefix("./secrets/") in made, name


def test_no_password_is_written_into_the_compose_stack() -> None:
    defined = set(compose()["secrets"])
    for name, s in compose()["services"].items():
        assert set(s.get("secrets", [])) <= defined, name
        for key, value in (s.get("environment") or {}).items():
            assert not re.search("PASSWORD|TOKEN|SECRET", key), (name, key)
            assert "@" not in str(value) or "password_file=" in str(value), (name, key)
    text = (COMPOSE_DIR / "compose.yaml").read_text()
    assert not re.search(r"://[^/\s:@]+:[^/\s@]+@", text)  # no user:password@ in a URL


def make_tokens_roles() -> list[str]:
    return [
        line.split("--role", 1)[1].split()[0]
        for line in (COMPOSE_DIR / "make-tokens.sh").read_text().splitlines()
        if line.strip().startswith("tikk auth create")
    ]


def test_the_credentials_step_runs_real_tikk_commands() -> None:
    script = (COMPOSE_DIR / "make-tokens.sh").read_text().splitlines()
    commands = [shlex.split(line)[1:] for line in script if line.strip().startswith("tikk ")]
    assert len(commands) == 2
    for command in commands:
        assert_tikk_accepts(command)
    assert [Grant.parse(role).role.value for role in make_tokens_roles()] == ["worker", "read"]


def test_prometheus_loads_tikk_s_alert_rules_and_scrapes_every_process() -> None:
    config = yaml.safe_load((COMPOSE_DIR / "prometheus.yml").read_text())
    mounts = dict(v.split(":")[:2] for v in service("prometheus")["volumes"])
    assert config["rule_files"] == [mounts["../prometheus/tikk-alerts.yml"]]
    assert (COMPOSE_DIR / "../prometheus/tikk-alerts.yml").exists()
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    targets = {t for job in jobs.values() for c in job["static_configs"] for t in c["targets"]}
    assert targets == {"server:7071", "dispatcher-1:7071", "dispatcher-2:7071", "worker:7071"}
    server = jobs["tikk-server"]
    assert server["scheme"] == "https" and server["authorization"]["type"] == "Bearer"
    assert server["authorization"]["credentials_file"].startswith(mounts["tikk-tokens"])
    assert server["tls_config"]["ca_file"] == "/run/secrets/api-ca"
    assert "api-ca" in service("prometheus")["secrets"]


def test_the_compose_scripts_parse() -> None:
    for script in sorted(COMPOSE_DIR.glob("*.sh")):
        done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True,
                              timeout=30, check=False)  # fmt: skip
        assert done.returncode == 0, (script.name, done.stderr)
    compile((COMPOSE_DIR / "cassandra-roles.py").read_text(), "cassandra-roles.py", "exec")


# --- the Helm chart ---


def values() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return loaded


def template_commands() -> dict[str, list[str]]:
    """The tikk command line of each template that runs one (its container's ``args:``), with
    template expressions replaced by the values they print by default."""
    found = {}
    for path in sorted((CHART / "templates").glob("*.yaml")):
        lines = path.read_text().splitlines()
        starts = [i for i, line in enumerate(lines) if line.strip() == "args:"]
        for start in starts:
            indent = len(lines[start + 1]) - len(lines[start + 1].lstrip())
            items = []
            for line in lines[start + 1 :]:
                if not line.startswith(" " * indent + "- "):
                    break
                items.append(line.strip()[2:].strip('"'))
            found[path.name] = items
    return found


def default_value(item: str) -> str:
    """A template item as the default values print it where it is a plain value of them
    (``{{ .Values.shards | quote }}``), else any text (a URL, a path: tikk's parser takes any
    string there)."""
    setting = re.search(r"\.Values\.([\w.]+)", item)
    if setting is None:
        return _TEMPLATE.sub("x", item)
    value: Any = values()
    for key in setting.group(1).split("."):
        value = value[key]
    return _TEMPLATE.sub(str(value), item)


def test_the_chart_is_a_helm_v2_application_chart() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == "tikk"
    assert chart["type"] == "application" and re.fullmatch(r"\d+\.\d+\.\d+", chart["version"])
    assert (CHART / "templates" / "NOTES.txt").exists()
    assert (CHART / "templates" / "_helpers.tpl").exists()


def test_the_chart_s_defaults_run_two_dispatchers_and_are_monitored() -> None:
    v = values()
    assert v["dispatcher"]["replicas"] >= 2
    assert v["serviceMonitor"]["enabled"] is True
    for component in ("server", "dispatcher"):
        assert v[component]["pdb"]["maxUnavailable"] >= 1
        assert v[component]["resources"]["requests"]
    for worker in v["workers"]:
        assert re.fullmatch(r"[\w.]+:\w+", worker["target"]) and worker["queues"]
        assert worker["resources"]["requests"]


def test_the_chart_s_pods_run_as_non_root_on_a_read_only_root() -> None:
    v = values()
    assert v["podSecurityContext"]["runAsNonRoot"] is True
    assert v["podSecurityContext"]["runAsUser"] == TIKK_UID
    assert v["securityContext"]["readOnlyRootFilesystem"] is True
    assert v["securityContext"]["allowPrivilegeEscalation"] is False
    for name in ("server.yaml", "dispatcher.yaml", "workers.yaml", "migrate-job.yaml"):
        text = (CHART / "templates" / name).read_text()
        assert 'include "tikk.scratchMounts"' in text and 'include "tikk.scratchVolumes"' in text
    assert "mountPath: /tmp" in (CHART / "templates" / "_helpers.tpl").read_text()


def test_the_schema_is_migrated_by_a_hook_before_install_and_upgrade() -> None:
    job = (CHART / "templates" / "migrate-job.yaml").read_text()
    assert '"helm.sh/hook": pre-install,pre-upgrade' in job
    assert template_commands()["migrate-job.yaml"][0] == "migrate"


def test_the_chart_runs_server_dispatcher_worker_and_migrate() -> None:
    assert {name: c[0] for name, c in template_commands().items()} == {
        "server.yaml": "server", "dispatcher.yaml": "dispatcher",
        "workers.yaml": "worker", "migrate-job.yaml": "migrate",
    }  # fmt: skip


@pytest.mark.parametrize("template", sorted(template_commands()))
def test_each_tikk_command_line_of_the_chart_is_one_tikk_accepts(template: str) -> None:
    command = [default_value(item) for item in template_commands()[template]]
    assert_tikk_accepts(command)


# --- the chart through helm and kubeconform, when scripts/deploy-check.sh built them ---


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    """``helm`` run with ``args``, once built (``tests.deploy_tools``; skips if it is not)."""
    return subprocess.run([str(built(HELM)), *args], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip


def rendered() -> list[dict[str, Any]]:
    done = helm("template", "tikk", str(CHART), "--namespace", "tikk")
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def test_the_chart_passes_helm_lint_strict() -> None:
    done = helm("lint", "--strict", str(CHART))
    assert done.returncode == 0, done.stdout + done.stderr


def test_each_rendered_tikk_command_line_is_one_tikk_accepts() -> None:
    commands = [
        container["args"]
        for doc in rendered()
        if doc["kind"] in ("Deployment", "Job")
        for container in doc["spec"]["template"]["spec"]["containers"]
    ]
    assert sorted(c[0] for c in commands) == ["dispatcher", "migrate", "server", "worker"]
    for command in commands:
        assert_tikk_accepts(command)


def test_the_rendered_config_files_hold_urls_tikk_parses(tmp_path: Path) -> None:
    (config,) = [doc for doc in rendered() if doc["kind"] == "ConfigMap"]
    secrets = "/etc/tikk/secrets/"
    for name in ("cassandra-password", "kafka-password", "zookeeper-password"):
        (tmp_path / name).write_text("pw\n")
    for file, keys in (("tikk.toml", {"store", "history", "queue", "ownership"}),
                       ("worker.toml", {"queue"})):  # fmt: skip
        urls = tomllib.loads(config["data"][file])["backends"]
        assert set(urls) == keys, file
        for key, url in urls.items():
            assert secrets in url and not re.search(r"://[^/@]+:[^/@]+@", url), key
            parsed = BackendUrl.parse(key, url.replace(secrets, f"{tmp_path}/"))
            assert parsed.credentials is not None and parsed.credentials.password == "pw"
    workers = tomllib.loads(config["data"]["worker.toml"])["backends"]["queue"]
    assert workers.startswith(f"kafka://{values()['backends']['kafka']['workerUser']}@")


def test_the_rendered_chart_is_valid_against_the_kubernetes_schemas() -> None:
    kube = built(SCHEMAS / "kubernetes")
    kubeconform = built(KUBECONFORM)
    version = sorted(p.name.split("-")[0] for p in kube.iterdir())[-1].lstrip("v")
    manifests = helm("template", "tikk", str(CHART), "--namespace", "tikk").stdout
    done = subprocess.run(
        [str(kubeconform), "-strict", "-summary", "-kubernetes-version", version,
         "-schema-location", f"{kube}/{{{{ .NormalizedKubernetesVersion }}}}-local"
         "{{ .StrictSuffix }}/{{ .ResourceKind }}{{ .KindSuffix }}.json",
         "-schema-location", f"{SCHEMAS}/crds/{{{{ .Group }}}}/{{{{ .ResourceKind }}}}_"
         "{{ .ResourceAPIVersion }}.json"],
        input=manifests, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Invalid: 0, Errors: 0, Skipped: 0" in done.stdout
