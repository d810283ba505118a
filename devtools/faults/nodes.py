"""Faults of one node of the replicated stack (three of each service, ``devtools.stack``):
what the loss of a Cassandra node, a Kafka broker or a ZooKeeper server costs tikk.

* ``kill cassandra node``: ``kill -9`` of one of the three, started again after a while (its
  peers hold every row at replication factor 3; the writes it missed come back as hints);
* ``kill kafka leader``: ``kill -9`` of the broker that leads a partition of the workload's
  topic, on purpose, so that publishing to that partition stalls until the controller moves
  its leadership;
* ``kill zookeeper leader``: ``kill -9`` of the ensemble's leader (the dispatchers' sessions
  must outlive the election);
* ``stop cassandra node``, ``stop kafka broker``: SIGSTOP then SIGCONT (a node that accepts
  connections and never answers), by ``services.ServiceStopper``;
* ``partition node``: every packet to and from one node's loopback address dropped by
  iptables (root only), then let through again: the node runs on, alone, and its peers and
  clients see a silent address (no connection refused, no reset), as after a switch fails.

A killed node stays down for the fault's hold, is started again by the stack's own launcher,
and the window ends when it answers. ``restore`` starts whatever a cut-short run left down.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
from typing import Any

from devtools import stack, stack_launch
from devtools.faults.records import FaultKind

log = logging.getLogger("devtools.faults")
# The planned target of a fault that hits whichever node leads when it comes.
LEADER = "leader"


def node_of(label: str) -> stack.Service:
    """The node a label names: ``cassandra-2`` is the second Cassandra node."""
    name, _, index = label.rpartition("-")
    if name not in stack.SERVICE_NAMES or not index.isdigit():
        raise ValueError(f"{label!r} names no node of the replicated stack")
    return stack.Service(name, int(index))


def node_labels(name: str) -> list[str]:
    return [n.label for n in stack.nodes(name, stack.REPLICAS)]


def planned_targets(kind: FaultKind) -> list[str]:
    """What a fault of ``kind`` may be aimed at when it is planned."""
    if kind in (FaultKind.KILL_KAFKA_LEADER, FaultKind.KILL_ZOOKEEPER_LEADER):
        return [LEADER]
    if kind is FaultKind.PARTITION_NODE:
        return [label for name in stack.SERVICE_NAMES for label in node_labels(name)]
    return node_labels("kafka" if kind is FaultKind.STOP_KAFKA_BROKER else "cassandra")


class NodeFaults:
    """Kills and restarts nodes; finds the leaders a fault is aimed at. ``topic`` is the
    workload's Kafka topic, ``kafka_url`` how to reach its brokers."""

    def __init__(self, topic: str, kafka_url: str) -> None:
        self._topic = topic
        self._kafka_url = kafka_url
        self._down: set[str] = set()
        self._cut: set[str] = set()
        self._partition = 0

    def resolve(self, kind: FaultKind, planned: str) -> stack.Service:
        """The node a fault hits now: ``planned``, or the leader it names."""
        if planned != LEADER:
            return node_of(planned)
        if kind is FaultKind.KILL_ZOOKEEPER_LEADER:
            return next(
                n for n in stack.nodes("zookeeper", stack.REPLICAS)
                if stack_launch.zookeeper_mode(n) == "leader"
            )  # fmt: skip
        # Each kill aims at the leader of the next partition, so that, over a run, every
        # broker leading a partition of the busy topic is hit.
        leader = asyncio.run(self.kafka_leader(self._partition))
        self._partition += 1
        return stack.Service("kafka", leader)

    async def kafka_leader(self, partition: int) -> int:
        """The node id (its index) of the broker leading ``partition`` of the topic."""
        from aiokafka.admin import AIOKafkaAdminClient

        from tikk.queue_contract import KafkaQueueUrl

        options = KafkaQueueUrl.from_url(self._kafka_url).client_options()
        admin = AIOKafkaAdminClient(**options, request_timeout_ms=5_000)
        await asyncio.wait_for(admin.start(), 10)
        try:
            described: Any = await asyncio.wait_for(admin.describe_topics([self._topic]), 10)
        finally:
            await admin.close()
        partitions = sorted(described[0]["partitions"], key=lambda p: p["partition"])
        leader = int(partitions[partition % len(partitions)]["leader"])
        if leader < 1:
            raise RuntimeError(f"partition {partition} of {self._topic} has no leader now")
        return leader

    def kill(self, node: stack.Service) -> int:
        """``kill -9`` of ``node``; its pid."""
        pid = node.pid() or 0
        self._down.add(node.label)
        node.kill()
        log.info("killed %s (pid %s)", node.label, pid)
        return pid

    def start(self, node: stack.Service) -> None:
        """Start ``node`` again and wait until it answers."""
        stack_launch.start_node(node)
        self._down.discard(node.label)

    def cut(self, node: stack.Service) -> None:
        """Drop every packet to and from ``node``'s address."""
        self._cut.add(node.label)
        _drop("-I", node.host)
        log.info("cut %s (%s) off", node.label, node.host)

    def heal(self, node: stack.Service) -> None:
        """Let ``node``'s packets through again."""
        _drop("-D", node.host)
        self._cut.discard(node.label)

    def restore(self) -> list[str]:
        """Let through what a fault left cut off, and start every node a fault left down;
        their labels."""
        restored = []
        for label in sorted(self._cut):
            self.heal(node_of(label))
            restored.append(f"{label} reconnected")
        for label in sorted(self._down):
            try:
                self.start(node_of(label))
                restored.append(label)
            except Exception as exc:
                log.error("could not start %s again: %s", label, exc)
        return restored


def check_can_cut_off() -> None:
    """Raise ``RuntimeError`` saying why a node cannot be cut off here (not root, or no
    iptables): before a run, so that it does not end minutes in, at its first cut."""
    if shutil.which("iptables") is None or os.geteuid() != 0:
        raise RuntimeError("partition node needs root and iptables (apt-get install iptables)")


def _drop(action: str, address: str) -> None:
    """Insert (``-I``) or delete (``-D``) the two iptables rules that drop every packet from
    and to ``address`` (on loopback each packet passes INPUT once)."""
    check_can_cut_off()
    for match in ("-s", "-d"):
        rule = ["iptables", "-w", "5", action, "INPUT", match, address, "-j", "DROP"]
        subprocess.run(rule, check=True, capture_output=True, timeout=15)
