"""The replicated local stack's shape (``devtools.stack``, ``devtools.stack_launch``): every
node on a loopback address of its own, its configuration naming its peers, Cassandra's tokens
spread over the ring, and the URLs that name every node. Nothing is started here."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from devtools import stack, stack_launch
from tikk.queue_contract import KafkaQueueUrl
from tikk.urls import BackendUrl


@pytest.fixture
def stack_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TIKK_STACK_DIR", str(tmp_path))
    return tmp_path


def test_each_replicated_node_has_an_address_and_a_home_of_its_own(stack_dir: Path) -> None:
    every = [n for name in stack.SERVICE_NAMES for n in stack.nodes(name, stack.REPLICAS)]
    assert len({n.host for n in every}) == 9 and all(n.host.startswith("127.0.0.") for n in every)
    assert len({n.home for n in every}) == 9
    assert [n.host for n in stack.nodes("cassandra", 3)] == [
        "127.0.0.11",
        "127.0.0.12",
        "127.0.0.13",
    ]
    assert stack.nodes("kafka")[0] == stack.KAFKA and stack.KAFKA.home == stack_dir / "kafka"
    assert stack.Service("kafka", 2).home == stack_dir / "replicated" / "kafka-2"
    with pytest.raises(stack.StackError):
        stack.nodes("kafka", 2)


def test_cassandras_tokens_are_spread_evenly_and_interleaved() -> None:
    tokens = {i: stack_launch.cassandra_tokens(stack.Service("cassandra", i)) for i in (1, 2, 3)}
    ring = sorted(t for each in tokens.values() for t in each)
    assert len(set(ring)) == 24 and ring[0] >= -(2**63) and ring[-1] < 2**63
    gaps = {b - a for a, b in itertools.pairwise(ring)}
    assert max(gaps) - min(gaps) <= 1
    owner = {t: i for i, each in tokens.items() for t in each}
    assert [owner[t] for t in ring[:6]] == [1, 2, 3, 1, 2, 3]


def test_a_kafka_node_names_its_peers_as_voters_and_replicates_its_topics(stack_dir: Path) -> None:
    text = stack_launch._kafka_properties(stack.Service("kafka", 2), auth=False)
    settings = dict(
        line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#")
    )
    assert settings["node.id"] == "2"
    voters = f"1@127.0.0.21:{stack.CONTROLLER_PORT},2@127.0.0.22:{stack.CONTROLLER_PORT}"
    assert settings["controller.quorum.voters"].startswith(voters)
    assert settings["listeners"].startswith(f"PLAINTEXT://127.0.0.22:{stack.KAFKA_PORT}")
    assert (settings["default.replication.factor"], settings["min.insync.replicas"]) == ("3", "2")
    assert settings["unclean.leader.election.enable"] == "false"
    one = stack_launch._kafka_properties(stack.KAFKA, auth=False)
    assert "min.insync.replicas=1" in one and "controller.quorum.voters=1@127.0.0.1:" in one


def test_the_replicated_urls_name_every_node_and_three_replicas(stack_dir: Path) -> None:
    urls = stack.urls("plain", count=3)
    queue = KafkaQueueUrl.from_url(urls["queue_url"])
    assert queue.bootstrap_servers == tuple(f"127.0.0.2{i}:{stack.KAFKA_PORT}" for i in (1, 2, 3))
    assert (queue.replication, queue.min_insync) == (3, 2)
    assert urls["store_url"].startswith(f"cassandra://127.0.0.11:{stack.CQL_PORT},127.0.0.12:")
    assert urls["ownership_url"].count(f":{stack.ZK_PORT}") == 3
    secrets = stack_dir / "secrets"
    secrets.mkdir()
    for service in ("cassandra", "kafka", "zookeeper"):
        (secrets / f"{service}.password").write_text("pw\n")
    for setting, url in stack.urls("auth", count=3).items():
        assert BackendUrl.parse(setting, url).credentials is not None


def test_only_the_replicated_stacks_jvms_skip_the_optimising_compiler(stack_dir: Path) -> None:
    replica, one = stack.Service("kafka", 2), stack.KAFKA
    assert "-XX:TieredStopAtLevel=1" in stack_launch._kafka_java_opts(replica)
    assert not any("Tiered" in flag for flag in stack_launch._kafka_java_opts(one))
    for name in stack.SERVICE_NAMES:
        assert stack_launch.sizing(stack.Service(name, 1)).jit == stack_launch.C1_ONLY
        assert stack_launch.sizing(stack.nodes(name)[0]).jit == ()
