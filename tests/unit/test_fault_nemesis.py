"""The nemesis brings a killed node back beside the next faults: a fault of another service
does not wait for it, one of the same service does, and the node's window ends when it
answered. Fakes stand in for the processes and nodes; what is tested is the sequencing."""

from __future__ import annotations

import threading
import time
from typing import Any, cast

from devtools import stack
from devtools.faults.nemesis import Nemesis, PlannedFault
from devtools.faults.nodes import NodeFaults, node_of
from devtools.faults.records import FaultKind


class Log:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.lock = threading.Lock()

    def add(self, event: str) -> None:
        with self.lock:
            self.events.append(event)


class FakeCluster:
    def __init__(self, log: Log) -> None:
        self.log = log

    def kill9(self, role: str) -> int:
        self.log.add(f"kill {role}")
        return 1

    def restart(self, role: str) -> None:
        self.log.add(f"restarted {role}")

    def revive_crashed(self) -> None:
        return None


class FakeNodes:
    """Nodes whose start blocks until the test lets each answer."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.answer = {label: threading.Event() for label in ("cassandra-1", "cassandra-2")}

    def resolve(self, kind: FaultKind, planned: str) -> stack.Service:
        return node_of(planned)

    def kill(self, node: stack.Service) -> int:
        self.log.add(f"kill {node.label}")
        return 2

    def start(self, node: stack.Service) -> None:
        self.answer[node.label].wait(10)
        self.log.add(f"{node.label} answers")

    def restore(self) -> list[str]:
        return []


def fault(kind: FaultKind, target: str, at_s: float) -> PlannedFault:
    return PlannedFault(kind, target, at_s, 0.0)


def test_a_killed_node_comes_back_beside_other_faults_and_its_service_waits_for_it() -> None:
    log = Log()
    nodes = FakeNodes(log)
    nemesis = Nemesis(
        cast(Any, FakeCluster(log)), cast(Any, None), cast(NodeFaults, cast(Any, nodes))
    )
    plan = [
        fault(FaultKind.KILL_CASSANDRA_NODE, "cassandra-1", 0.0),
        fault(FaultKind.KILL_DISPATCHER, "dispatcher-0", 0.05),
        fault(FaultKind.KILL_CASSANDRA_NODE, "cassandra-2", 0.1),
    ]
    runner = threading.Thread(target=nemesis.run, args=(plan, time.monotonic()))
    runner.start()
    deadline = time.monotonic() + 5
    while "restarted dispatcher-0" not in log.events and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # the second Cassandra kill is due by now, and must still wait
    assert log.events == ["kill cassandra-1", "kill dispatcher-0", "restarted dispatcher-0"]
    time.sleep(0.1)
    nodes.answer["cassandra-1"].set()
    answered_ms = time.time_ns() // 1_000_000
    nodes.answer["cassandra-2"].set()
    runner.join(10)
    assert log.events[3:] == ["cassandra-1 answers", "kill cassandra-2", "cassandra-2 answers"]
    first, dispatcher, second = nemesis.windows
    assert first.end_ms >= answered_ms - 50  # ends when the node answered, not at its start
    assert first.end_ms - first.start_ms >= 300
    assert dispatcher.end_ms < first.end_ms
    assert second.end_ms >= second.start_ms
