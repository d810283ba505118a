"""The nemesis: faults on a schedule, one at a time, each recorded as a window.

* ``kill server|dispatcher|worker``: ``kill -9`` of the process group, restarted 1-4 s later;
  the window ends when the new process is ready;
* ``pause dispatcher``: SIGSTOP for longer than its ZooKeeper session, then SIGCONT;
* ``stop kafka|cassandra``: SIGSTOP of the service's JVM, then SIGCONT; the window ends when
  it answers again;
* ``pause queue``: an operator pauses the workload's queue (``UpdateQueue``), then resumes
  it: what came due meanwhile is held by the dispatchers and released after, late but whole;
* on the replicated stack, one node of a service killed, stopped or cut off
  (``devtools.faults.nodes``).

Faults are planned up front (seeded, so a run can be repeated) by a mode's schedule: a
``FaultSpec`` spreads given numbers of each kind evenly over a span, a ``storm.StormSpec``
brings one of a random kind every few seconds. They are carried out one at a time; one that
overruns its slot delays the next. A killed node is the exception: it comes back beside the
next faults (a JVM started on the loaded machine takes up to a minute to answer, which held
every later fault of the smoke past the workload), and its window ends when it answers; a
fault aimed at the same service waits for it, so one node per service is down at most.
``restore`` undoes whatever is left undone.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass, replace
from typing import Protocol, Self

from devtools import stack
from devtools.faults.cluster import Cluster
from devtools.faults.nodes import NodeFaults, node_of, planned_targets
from devtools.faults.records import ROLLING_STEPS, FaultKind, FaultWindow
from devtools.faults.services import ServiceStopper
from devtools.faults.worker_app import QUEUE

log = logging.getLogger("devtools.faults")


@dataclass(frozen=True)
class PlannedFault:
    kind: FaultKind
    target: str
    at_s: float
    hold_s: float


class FaultSchedule(Protocol):
    """The faults of a mode: which, when, and how long each lasts."""

    @property
    def service_faults(self) -> bool:
        """Whether Kafka or Cassandra is ever stopped."""
        ...

    def without_service_faults(self) -> Self:
        """The same schedule with Kafka and Cassandra left alone."""
        ...

    def plan(self, rng: random.Random, cluster_roles: dict[str, list[str]]) -> list[PlannedFault]:
        """The faults of one run in the order they come, drawn from ``rng`` only (a seed
        repeats them), each aimed at one of ``cluster_roles`` (``server``, ``dispatcher``,
        ``worker`` → roles) or at a service."""
        ...


class Holds(Protocol):
    """How long each kind of fault lasts (a kill: how long the process stays down)."""

    @property
    def kill_down_s(self) -> tuple[float, float]: ...
    @property
    def pause_s(self) -> float: ...
    @property
    def kafka_stop_s(self) -> float: ...
    @property
    def cassandra_stop_s(self) -> float: ...
    @property
    def queue_pause_s(self) -> float: ...
    @property
    def node_down_s(self) -> tuple[float, float]: ...
    @property
    def node_stop_s(self) -> float: ...


_NODE_KILLS = (
    FaultKind.KILL_CASSANDRA_NODE,
    FaultKind.KILL_KAFKA_LEADER,
    FaultKind.KILL_ZOOKEEPER_LEADER,
)


def hold_for(kind: FaultKind, holds: Holds, rng: random.Random) -> float:
    """How long a fault of ``kind`` lasts (a kill's time down is drawn from ``rng``)."""
    if kind.is_kill:
        return rng.uniform(*holds.kill_down_s)
    if kind in _NODE_KILLS:
        return rng.uniform(*holds.node_down_s)
    if kind.is_node_fault:
        return holds.node_stop_s
    if kind is FaultKind.PAUSE_DISPATCHER:
        return holds.pause_s
    if kind is FaultKind.STOP_KAFKA:
        return holds.kafka_stop_s
    if kind is FaultKind.PAUSE_QUEUE:
        return holds.queue_pause_s
    return holds.cassandra_stop_s


@dataclass(frozen=True)
class FaultSpec:
    """How many faults of each kind, how long each lasts, and the span they are spread
    over (seconds from the start of the workload)."""

    server_kills: int
    dispatcher_kills: int
    worker_kills: int
    dispatcher_pauses: int
    kafka_stops: int
    cassandra_stops: int
    first_at_s: float
    last_at_s: float
    kill_down_s: tuple[float, float] = (1.0, 4.0)
    pause_s: float = 9.0
    kafka_stop_s: float = 30.0
    cassandra_stop_s: float = 30.0
    queue_pauses: int = 0
    queue_pause_s: float = 12.0
    # On the replicated stack: how many times a node of each kind is hit.
    node_faults: tuple[tuple[FaultKind, int], ...] = ()
    node_down_s: tuple[float, float] = (5.0, 10.0)
    node_stop_s: float = 10.0

    @property
    def service_faults(self) -> bool:
        return self.kafka_stops + self.cassandra_stops + sum(n for _, n in self.node_faults) > 0

    def without_service_faults(self) -> FaultSpec:
        return replace(self, kafka_stops=0, cassandra_stops=0, node_faults=())

    def plan(self, rng: random.Random, cluster_roles: dict[str, list[str]]) -> list[PlannedFault]:
        return plan_faults(self, rng, cluster_roles)


def targets(kind: FaultKind, cluster_roles: dict[str, list[str]]) -> list[str]:
    return {
        FaultKind.KILL_SERVER: cluster_roles["server"],
        FaultKind.KILL_DISPATCHER: cluster_roles["dispatcher"],
        FaultKind.KILL_WORKER: cluster_roles["worker"],
        FaultKind.PAUSE_DISPATCHER: cluster_roles["dispatcher"],
        FaultKind.STOP_KAFKA: ["kafka"],
        FaultKind.STOP_CASSANDRA: ["cassandra"],
        FaultKind.PAUSE_QUEUE: [QUEUE],
    }.get(kind) or planned_targets(kind)


def plan_faults(
    spec: FaultSpec, rng: random.Random, cluster_roles: dict[str, list[str]]
) -> list[PlannedFault]:
    """The faults of a run in random order, evenly spaced from ``first_at_s`` to
    ``last_at_s``, each with a random target of its kind."""
    kinds = (
        [FaultKind.KILL_SERVER] * spec.server_kills
        + [FaultKind.KILL_DISPATCHER] * spec.dispatcher_kills
        + [FaultKind.KILL_WORKER] * spec.worker_kills
        + [FaultKind.PAUSE_DISPATCHER] * spec.dispatcher_pauses
        + [FaultKind.STOP_KAFKA] * spec.kafka_stops
        + [FaultKind.STOP_CASSANDRA] * spec.cassandra_stops
        + [FaultKind.PAUSE_QUEUE] * spec.queue_pauses
        + [kind for kind, count in spec.node_faults for _ in range(count)]
    )
    rng.shuffle(kinds)
    step = (spec.last_at_s - spec.first_at_s) / max(1, len(kinds))
    planned = []
    for i, kind in enumerate(kinds):
        hold = hold_for(kind, spec, rng)
        target = rng.choice(targets(kind, cluster_roles))
        planned.append(PlannedFault(kind, target, spec.first_at_s + i * step, hold))
    return planned


# How often, between faults, the nemesis looks for processes that crashed on their own.
_REVIVE_EVERY_S = 1.0


def _service_of(fault: PlannedFault) -> str:
    """The service a node fault hits (the leader it names is found only when it comes)."""
    if fault.kind is FaultKind.KILL_KAFKA_LEADER:
        return "kafka"
    if fault.kind is FaultKind.KILL_ZOOKEEPER_LEADER:
        return "zookeeper"
    return node_of(fault.target).name


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Nemesis:
    """Carries out planned faults against a cluster and the stack's services."""

    def __init__(
        self, cluster: Cluster, services: ServiceStopper, nodes: NodeFaults | None = None
    ) -> None:
        self.cluster = cluster
        self.services = services
        self.nodes = nodes
        self.windows: list[FaultWindow] = []
        self._paused: set[str] = set()
        self._held_queues: set[str] = set()
        self._stop = threading.Event()
        # Service name → the thread starting its killed node again; window index → when it
        # answered.
        self._returning: dict[str, threading.Thread] = {}
        self._back_at: dict[int, int] = {}

    def run(self, plan: list[PlannedFault], origin: float) -> None:
        """Each fault at ``origin`` (a ``time.monotonic`` instant) plus its offset, one after
        another (a fault that overruns its slot delays the next)."""
        try:
            for fault in plan:
                if not self._wait_until(origin + fault.at_s):
                    return
                if fault.kind.is_node_fault:
                    self._node_back(_service_of(fault))
                log.info("fault: %s %s for %.1f s", fault.kind, fault.target, fault.hold_s)
                self.windows.append(self.inflict(fault))
        finally:
            self._nodes_back()

    def _node_back(self, service: str) -> None:
        """Wait until a killed node of ``service`` answers again, if one is starting."""
        if (thread := self._returning.pop(service, None)) is not None:
            thread.join()

    def _nodes_back(self) -> None:
        """Wait for every killed node, then end each window when its node answered."""
        for service in list(self._returning):
            self._node_back(service)
        for index, end_ms in self._back_at.items():
            if index < len(self.windows):  # not so if the fault itself broke off
                self.windows[index] = replace(self.windows[index], end_ms=end_ms)
        self._back_at.clear()

    def _start_beside(self, nodes: NodeFaults, node: stack.Service) -> None:
        """Start ``node`` again on a thread of its own; the window about to be recorded
        ends when it answers (or when starting it failed: ``restore`` tries again)."""
        index = len(self.windows)

        def back() -> None:
            try:
                nodes.start(node)
            except Exception as exc:
                log.error("could not start %s again: %s", node.label, exc)
            self._back_at[index] = _now_ms()

        self._returning[node.name] = threading.Thread(target=back, daemon=True)
        self._returning[node.name].start()

    def cancel(self) -> None:
        self._stop.set()

    def _wait_until(self, instant: float) -> bool:
        """Wait for the ``time.monotonic`` ``instant``, starting again any process that
        crashed meanwhile (about once a second); False if cancelled."""
        while (left := instant - time.monotonic()) > 0:
            if self._stop.wait(min(left, _REVIVE_EVERY_S)):
                return False
            self.cluster.revive_crashed()
        return not self._stop.is_set()

    def inflict(self, fault: PlannedFault) -> FaultWindow:
        """Carry out one fault and wait until what it hit is back."""
        began = _now_ms()
        if fault.kind in ROLLING_STEPS:
            target, pid = self._roll(fault)
            return FaultWindow(fault.kind, target, began, _now_ms(), pid)
        if fault.kind.is_node_fault:
            target, pid = self._hit_node(fault)
            return FaultWindow(fault.kind, target, began, _now_ms(), pid)
        if fault.kind.is_kill:
            pid = self.cluster.kill9(fault.target)
            time.sleep(fault.hold_s)
            self.cluster.restart(fault.target)
        elif fault.kind is FaultKind.PAUSE_QUEUE:
            pid = 0
            self._held_queues.add(fault.target)
            self.cluster.pause_queue(fault.target, True)
            time.sleep(fault.hold_s)
            self.cluster.pause_queue(fault.target, False)
            self._held_queues.discard(fault.target)
        elif fault.kind is FaultKind.PAUSE_DISPATCHER:
            pid = self.cluster.members[fault.target].pid
            self._paused.add(fault.target)
            self.cluster.pause(fault.target)
            time.sleep(fault.hold_s)
            self.cluster.resume(fault.target)
            self._paused.discard(fault.target)
        else:
            pid = self.services.stop(fault.target, fault.hold_s)
            time.sleep(fault.hold_s)
            self.services.resume(fault.target)
        return FaultWindow(fault.kind, fault.target, began, _now_ms(), pid)

    def _hit_node(self, fault: PlannedFault) -> tuple[str, int]:
        """Kill or stop one node, then start or continue it and wait until it answers;
        the node's label and pid."""
        if self.nodes is None:
            raise RuntimeError(f"{fault.kind} needs the replicated stack")
        node: stack.Service = self.nodes.resolve(fault.kind, fault.target)
        if fault.kind in _NODE_KILLS:
            pid = self.nodes.kill(node)
            time.sleep(fault.hold_s)
            self._start_beside(self.nodes, node)
        elif fault.kind is FaultKind.PARTITION_NODE:
            pid = node.pid() or 0
            self.nodes.cut(node)
            time.sleep(fault.hold_s)
            self.nodes.heal(node)
        else:
            pid = self.services.stop(node.label, fault.hold_s)
            time.sleep(fault.hold_s)
            self.services.resume(node.label)
        return node.label, pid

    def _roll(self, fault: PlannedFault) -> tuple[str, int]:
        """One step of a rolling restart (``devtools.faults.rolling``), waiting until what
        it restarted answers; what it hit and the pid stopped (0 for the migration)."""
        if fault.kind is FaultKind.RESTART_PROCESS:
            pid = self.cluster.terminate(fault.target)
            self.cluster.restart(fault.target)
            return fault.target, pid
        if fault.kind is FaultKind.MIGRATE_SCHEMA:
            applied = self.cluster.migrate_live()
            log.info("applied to the live keyspace: %s", ", ".join(applied) or "nothing")
            return fault.target, 0
        if self.nodes is None:
            raise RuntimeError(f"{fault.kind} needs the replicated stack")
        node = node_of(fault.target)
        pid = node.pid() or 0
        node.stop()
        self.nodes.start(node)
        return node.label, pid

    def restore(self) -> list[str]:
        """Continue paused processes and stopped services (waiting until the services
        answer), start killed nodes again; returns what had to be restored."""
        self._nodes_back()
        restored = []
        for role in list(self._paused):
            self.cluster.resume(role)
            restored.append(role)
        self._paused.clear()
        restored += self.services.restore()
        restored += self.nodes.restore() if self.nodes is not None else []
        # Last: resuming a queue is a write to the store, which must be back first.
        for queue in list(self._held_queues):
            self.cluster.pause_queue(queue, False)
            restored.append(f"queue {queue}")
        self._held_queues.clear()
        return restored
