"""The suite's modes: ``ci`` (a few minutes, every process kind killed three times),
``soak`` (a given duration, about 21 kills of each process kind per hour, and Kafka and
Cassandra stopped for 30 s a few times an hour), and ``storm`` / ``storm-ci`` (a fault of a
random kind every 10-15 s under a heavier workload, for a few minutes or for two)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from devtools.faults.nemesis import FaultSchedule, FaultSpec
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
