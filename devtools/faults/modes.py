"""The suite's modes: ``ci`` (a few minutes, every process kind killed three times) and
``soak`` (a given duration, about 21 kills of each process kind per hour, and Kafka and
Cassandra stopped for 30 s a few times an hour)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from devtools.faults.nemesis import FaultSpec
from devtools.faults.workload import WorkloadSpec


@dataclass(frozen=True)
class Mode:
    """A complete run description. ``drain_s``: how long after the last due time the suite
    waits for starts and final states; ``timeout_s``: the hard limit of the whole run;
    ``after_ms``: how long after a fault window a due time still counts as inside it."""

    name: str
    workload: WorkloadSpec
    faults: FaultSpec
    drain_s: float
    timeout_s: float
    after_ms: int = 5_000

    def without_service_faults(self) -> Mode:
        """The same run with Kafka and Cassandra left alone."""
        return replace(self, faults=replace(self.faults, kafka_stops=0, cassandra_stops=0))


def ci() -> Mode:
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
        ),
        drain_s=45.0,
        timeout_s=600.0,
    )


def _per_hour(count: int, duration_s: float) -> int:
    return max(1, math.ceil(count * duration_s / 3600))


def soak(duration_s: float) -> Mode:
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
            first_at_s=20.0,
            last_at_s=max(30.0, duration_s - 60.0),
            kafka_stop_s=30.0,
            cassandra_stop_s=30.0,
        ),
        drain_s=90.0,
        timeout_s=duration_s + 1200.0,
    )
