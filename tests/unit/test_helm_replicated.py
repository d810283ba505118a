"""The Helm chart's probes, and its values for the replicated deployment
(``deploy/helm/tikk/values-replicated.yaml``) rendered by helm as an install would render them:
URLs tikk parses naming three nodes of each backend at the replication the README promises,
and processes spread so that one node's loss leaves a quorum. ``scripts/deploy-check.sh`` lints
and validates the same values; here what they say is read."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from tests.unit.test_deploy_files import CHART, helm
from tikk.queue_contract import KafkaQueueUrl

REPLICATED = CHART / "values-replicated.yaml"
_PROBED = ("server.yaml", "dispatcher.yaml", "workers.yaml")


def probe_path(template: str, probe: str) -> str:
    """The HTTP path the ``probe`` (readinessProbe, livenessProbe) of ``template`` asks."""
    text = (CHART / "templates" / template).read_text()
    found = re.search(rf"{probe}:\n\s+httpGet:\n\s+path: (\S+)", text)
    assert found is not None, f"{template} has no {probe}"
    return found.group(1)


@pytest.mark.parametrize("template", _PROBED)
def test_readiness_asks_readyz_and_liveness_asks_healthz(template: str) -> None:
    assert probe_path(template, "readinessProbe") == "/readyz"
    assert probe_path(template, "livenessProbe") == "/healthz"
    text = (CHART / "templates" / template).read_text()
    # A readiness check may take its 2 s bound: the kubelet's default 1 s would cut it.
    assert re.search(r"readinessProbe:(?:\n\s+.*)*?\n\s+timeoutSeconds: ([3-9]|\d\d)", text)


def replicated() -> list[dict[str, Any]]:
    done = helm("template", "tikk", str(CHART), "--namespace", "tikk", "-f", str(REPLICATED))
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def of_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == kind}


def hosts_of(url: str) -> list[str]:
    return urlsplit(url).netloc.rpartition("@")[2].split(",")


def test_the_replicated_urls_name_three_nodes_of_each_backend_at_quorum(tmp_path: Path) -> None:
    (config,) = of_kind(replicated(), "ConfigMap").values()
    urls = tomllib.loads(config["data"]["tikk.toml"])["backends"]
    for key in ("store", "history"):
        assert len(hosts_of(urls[key])) == 3, key
        assert parse_qs(urlsplit(urls[key]).query)["consistency"] == ["LOCAL_QUORUM"]
    (tmp_path / "kafka-password").write_text("pw\n")
    for file in ("tikk.toml", "worker.toml"):
        queue_url = tomllib.loads(config["data"][file])["backends"]["queue"]
        queue = KafkaQueueUrl.from_url(queue_url.replace("/etc/tikk/secrets/", f"{tmp_path}/"))
        assert len(queue.bootstrap_servers) == 3, file
        assert (queue.replication, queue.min_insync) == (3, 2), file
    assert len(hosts_of(urls["ownership"])) == 3


def test_the_replicated_keyspace_is_made_with_three_replicas() -> None:
    (job,) = of_kind(replicated(), "Job").values()
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    replication = args[args.index("--replication") + 1]
    assert re.search(r"'dc1': 3\b", replication) and "NetworkTopologyStrategy" in replication


def test_one_node_lost_leaves_a_quorum_of_servers_and_dispatchers() -> None:
    docs = replicated()
    deployments, budgets = of_kind(docs, "Deployment"), of_kind(docs, "PodDisruptionBudget")
    for component in ("server", "dispatcher"):
        spec = deployments[f"tikk-{component}"]["spec"]
        assert spec["replicas"] >= 3
        anti = spec["template"]["spec"]["affinity"]["podAntiAffinity"]
        (term,) = anti["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["topologyKey"] == "kubernetes.io/hostname"
        assert term["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"]
        budget = budgets[f"tikk-{component}"]["spec"]
        assert budget["maxUnavailable"] == 1  # a drain leaves replicas - 1 of them
        assert budget["selector"] == spec["selector"]
