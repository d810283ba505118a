"""The suite's modes: ``ci`` (a few minutes, every process kind killed three times),
``soak`` (a given duration, about 21 kills of each process kind per hour, and Kafka and
Cassandra stopped for 30 s a few times an hour), and ``storm`` / ``storm-ci`` (a fault of a
random kind every 10-15 s under a heavier workload, for a few minutes or for two).

On the replicated stack (``devtools.stack`` with three nodes of each service, tikk's
keyspace and topics at three replicas): ``replicated-ci`` (a node of each service killed once,
and a dispatcher and a worker, while tasks fire), ``replicated`` (every kind of node fault
twice, spread over five minutes), ``replicated-storm`` (a fault of a random kind, node
faults among them, every 10-15 s) and ``replicated-rolling`` (every node and process restarted
in turn, and a live schema migration)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from devtools.faults.nemesis import FaultSchedule, FaultSpec
from devtools.faults.records import NODE_FAULTS, FaultKind
from devtools.faults.rolling import RollingSpec
from devtools.faults.storm import StormSpec
from devtools.faults.workload import WorkloadSpec

Faults_co = TypeVar("Faults_co", bound=FaultSchedule, covariant=True)


@dataclass(frozen=True)
class Mode(Generic[Faults_co]):
    """A complete run description. ``drain_s``: how long after the last due time the suite
    waits for starts and final states; ``timeout_s``: the hard limit of the whole run;
    ``after_ms``: how long after a fault window a due time still counts as inside it."""

    name: str
    workload: WorkloadSpec
    faults: Faults_co
    drain_s: float
    timeout_s: float
    after_ms: int = 5_000
    # Nodes of each service: 1 (the one-node stack) or 3 (the replicated one).
    nodes: int = 1
    # tikk servers, all given to the workers and the suite's clients as one list.
    servers: int = 1
    # Shards of the run's store. Each owned shard costs the store a few reads a second however
    # idle it is (the rescans), so the replicated modes use fewer: see REPLICATED_SHARDS.
    shards: int = 32

    def without_service_faults(self) -> Mode[Faults_co]:
        """The same run with Kafka and Cassandra left alone."""
        return replace(self, faults=self.faults.without_service_faults())


def ci() -> Mode[FaultSpec]:
    """About 3.5 minutes in all on a 2-core machine that also runs the JVM services.
    Cassandra is stopped as long as in ``soak`` (30 s, six times the dispatchers' late-write
    grace and longer than the store's 15 s request timeout), so that writes held up by it become
    durable well after their due time; Kafka for 10 s."""
    return Mode(
        name="ci",
        workload=WorkloadSpec(rate_per_s=20.0, duration_s=140.0),
        faults=FaultSpec(
            server_kills=3,
            dispatcher_kills=3,
            worker_kills=3,
            dispatcher_pauses=1,
            kafka_stops=1,
            cassandra_stops=1,
            first_at_s=8.0,
            last_at_s=120.0,
            kafka_stop_s=10.0,
            cassandra_stop_s=30.0,
            queue_pauses=1,
        ),
        drain_s=45.0,
        timeout_s=600.0,
    )


def _per_hour(count: int, duration_s: float) -> int:
    return max(1, math.ceil(count * duration_s / 3600))


def soak(duration_s: float) -> Mode[FaultSpec]:
    """Faults over ``duration_s`` at the hourly rates; the workload runs just as long."""
    return Mode(
        name="soak",
        workload=WorkloadSpec(rate_per_s=20.0, duration_s=duration_s),
        faults=FaultSpec(
            server_kills=_per_hour(21, duration_s),
            dispatcher_kills=_per_hour(21, duration_s),
            worker_kills=_per_hour(21, duration_s),
            dispatcher_pauses=_per_hour(6, duration_s),
            kafka_stops=_per_hour(3, duration_s),
            cassandra_stops=_per_hour(3, duration_s),
            queue_pauses=_per_hour(6, duration_s),
            first_at_s=20.0,
            last_at_s=max(30.0, duration_s - 60.0),
            kafka_stop_s=30.0,
            cassandra_stop_s=30.0,
        ),
        drain_s=90.0,
        timeout_s=duration_s + 1200.0,
    )


# Creates per second in a storm, six times ci's. Without faults the cluster keeps up with it on
# the 2-core development machine (start p99 under a second), so a storm's lateness is the
# faults' doing, and the backlog each one leaves takes real work to clear.
STORM_RATE_PER_S = 120.0


def storm(duration_s: float = 300.0) -> Mode[StormSpec]:
    """A fault every 10-15 s from 10 s into the workload until 10 s before its end, at
    ``STORM_RATE_PER_S``. The workload's client has threads enough to keep its pace while
    creates wait out a server or a store that is away (each may retry for seconds)."""
    return Mode(
        name="storm",
        workload=WorkloadSpec(rate_per_s=STORM_RATE_PER_S, duration_s=duration_s, threads=256),
        faults=StormSpec(first_at_s=10.0, last_at_s=max(10.0, duration_s - 10.0)),
        drain_s=90.0,
        timeout_s=duration_s + 720.0,
    )


def storm_ci() -> Mode[StormSpec]:
    """A two-minute storm for CI: seven to eleven faults, every kind at least once (the kinds
    are dealt from a deck of seven); about three minutes in all on the 2-core machine."""
    return replace(storm(120.0), name="storm-ci", drain_s=60.0, timeout_s=600.0)


# The replicated stack's faults of each kind; Kafka and Cassandra are never stopped whole.
_EVERY_NODE_FAULT = tuple(sorted(NODE_FAULTS))
_PROCESS_FAULTS = (
    FaultKind.KILL_SERVER,
    FaultKind.KILL_DISPATCHER,
    FaultKind.KILL_WORKER,
    FaultKind.PAUSE_DISPATCHER,
    FaultKind.PAUSE_QUEUE,
)
# Creates per second on the replicated stack: three Cassandra nodes, three brokers and three
# ZooKeeper servers share the two cores with tikk, and a write costs Cassandra about four
# times its work at one replica. Measured without faults on the 2-core machine (90 s each,
# CPU of all processes): 10/s with 32 shards started p50 44 / p99 281 ms late at 1.5 cores;
# 20/s with 32 shards 197 / 1,199 ms at 1.95 (saturated), with 8 shards 45 / 309 ms at 1.75;
# 40/s with 8 shards 174 / 6,109 ms (past saturation). So 20/s with 8 shards, for every
# replicated mode, the storm included.
REPLICATED_RATE_PER_S = 20.0
# The CI smoke's rate: half of it. In CI the one-node stack runs beside the nine JVMs, and a
# killed node's JVM restarts beside the next faults; at 20/s a CI run saturated the machine
# until each fault's backlog outlasted the next (fired -> start p50 61 s in one run, and in
# another tasks still unstarted at the end of the drain, each started minutes later).
REPLICATED_CI_RATE_PER_S = 10.0
# Two idle dispatchers owning 32 shards cost the three nodes about a third of a core in
# rescans alone (four reads per shard a second, at any consistency level: the request is
# the cost, not the replicas), 8 shards a quarter of that.
REPLICATED_SHARDS = 8


def replicated_ci() -> Mode[FaultSpec]:
    """The CI smoke on the replicated stack: a Cassandra node, the Kafka broker leading a
    partition of the workload's topic and the ZooKeeper leader each killed once, and a
    dispatcher and a worker, while tasks fire; about three minutes."""
    return Mode(
        name="replicated-ci",
        workload=WorkloadSpec(rate_per_s=REPLICATED_CI_RATE_PER_S, duration_s=90.0),
        faults=FaultSpec(
            server_kills=0,
            dispatcher_kills=1,
            worker_kills=1,
            dispatcher_pauses=0,
            kafka_stops=0,
            cassandra_stops=0,
            first_at_s=10.0,
            last_at_s=75.0,
            node_faults=(
                (FaultKind.KILL_CASSANDRA_NODE, 1),
                (FaultKind.KILL_KAFKA_LEADER, 1),
                (FaultKind.KILL_ZOOKEEPER_LEADER, 1),
            ),
        ),
        # A task is lost if it has not started when the drain ends. On a cold stack in CI a
        # fault's backlog took minutes to clear (tasks started up to 4.5 min late, after a
        # 45 s drain had ended): late, which the report measures, not lost. The drain ends
        # as soon as every task started, so the margin costs nothing on time.
        drain_s=150.0,
        timeout_s=780.0,
        nodes=3,
        servers=2,
        shards=REPLICATED_SHARDS,
    )


def replicated(duration_s: float = 300.0) -> Mode[FaultSpec]:
    """Every node fault twice and every process kill twice, spread over ``duration_s``."""
    return Mode(
        name="replicated",
        workload=WorkloadSpec(rate_per_s=REPLICATED_RATE_PER_S, duration_s=duration_s),
        faults=FaultSpec(
            server_kills=2,
            dispatcher_kills=2,
            worker_kills=2,
            dispatcher_pauses=1,
            kafka_stops=0,
            cassandra_stops=0,
            first_at_s=15.0,
            last_at_s=max(30.0, duration_s - 30.0),
            node_faults=tuple((kind, 2) for kind in _EVERY_NODE_FAULT),
        ),
        drain_s=90.0,
        timeout_s=duration_s + 900.0,
        nodes=3,
        servers=2,
        shards=REPLICATED_SHARDS,
    )


def replicated_storm(duration_s: float = 300.0) -> Mode[StormSpec]:
    """A fault every 10-15 s, node faults and tikk's process faults dealt from one deck."""
    return Mode(
        name="replicated-storm",
        workload=WorkloadSpec(rate_per_s=REPLICATED_RATE_PER_S, duration_s=duration_s),
        faults=StormSpec(
            first_at_s=10.0,
            last_at_s=max(10.0, duration_s - 10.0),
            kinds=_PROCESS_FAULTS + _EVERY_NODE_FAULT,
        ),
        drain_s=90.0,
        timeout_s=duration_s + 900.0,
        nodes=3,
        servers=2,
        shards=REPLICATED_SHARDS,
    )


def replicated_rolling(duration_s: float = 420.0) -> Mode[RollingSpec]:
    """Every node and every tikk process restarted in turn, and a schema step applied to the
    live keyspace, while tasks fire (``devtools.faults.rolling``): the nine nodes took 5.5
    minutes on the 2-core machine (a broker or a Cassandra node 35-60 s each, ZooKeeper 5-9 s),
    so the workload lasts seven, past tikk's own restarts."""
    return Mode(
        name="replicated-rolling",
        workload=WorkloadSpec(rate_per_s=REPLICATED_RATE_PER_S, duration_s=duration_s),
        faults=RollingSpec(first_at_s=10.0),
        drain_s=60.0,
        timeout_s=duration_s + 900.0,
        nodes=3,
        servers=2,
        shards=REPLICATED_SHARDS,
    )
