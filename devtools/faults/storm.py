"""The storm: a fault of a random kind every few seconds for the whole run.

Spread-out faults show how each one is recovered from; they hide what happens when the next
comes before the stack has caught up with the last, as it does on a bad day in production.
A storm brings one every 10-15 s (the gap drawn anew each time) from ``first_at_s`` to
``last_at_s``: ``kill -9`` of the server, a dispatcher or a worker, a dispatcher paused past
its ZooKeeper session, Kafka or Cassandra stopped, the workload's queue paused by an operator.
The kinds are dealt from a deck shuffled anew each round, so every kind comes up once in each
round of seven and even a two-minute storm hits them all. Kafka is stopped for 8 s, Cassandra
for 10 s and the queue paused for 8 s, so that each fits, roughly, in its gap; the nemesis
carries faults out one at a time, so one that overruns delays the next.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from devtools.faults.nemesis import PlannedFault, hold_for, targets
from devtools.faults.records import NODE_FAULTS, ONE_NODE_FAULTS, FaultKind

# What hits the stack's services (the JVMs of ``devtools.stack``), not tikk's processes.
SERVICE_STOPS = frozenset({FaultKind.STOP_KAFKA, FaultKind.STOP_CASSANDRA} | NODE_FAULTS)


@dataclass(frozen=True)
class StormSpec:
    """Faults of ``kinds``, one every ``every_s`` (a range, seconds from one fault's planned
    start to the next) from ``first_at_s`` to ``last_at_s`` (seconds from the start of the
    workload). ``pause_s`` must exceed the dispatchers' ZooKeeper session."""

    first_at_s: float
    last_at_s: float
    every_s: tuple[float, float] = (10.0, 15.0)
    kinds: tuple[FaultKind, ...] = ONE_NODE_FAULTS
    kill_down_s: tuple[float, float] = (1.0, 4.0)
    pause_s: float = 9.0
    kafka_stop_s: float = 8.0
    cassandra_stop_s: float = 10.0
    queue_pause_s: float = 8.0
    node_down_s: tuple[float, float] = (4.0, 8.0)
    node_stop_s: float = 8.0

    @property
    def service_faults(self) -> bool:
        return not SERVICE_STOPS.isdisjoint(self.kinds)

    def without_service_faults(self) -> StormSpec:
        return replace(self, kinds=tuple(k for k in self.kinds if k not in SERVICE_STOPS))

    def plan(self, rng: random.Random, cluster_roles: dict[str, list[str]]) -> list[PlannedFault]:
        return plan_storm(self, rng, cluster_roles)


def plan_storm(
    spec: StormSpec, rng: random.Random, cluster_roles: dict[str, list[str]]
) -> list[PlannedFault]:
    """The storm's faults: at ``first_at_s``, then each a random ``every_s`` after the one
    before, up to ``last_at_s``; kinds dealt from a reshuffled deck, targets at random."""
    planned: list[PlannedFault] = []
    deck: list[FaultKind] = []
    at = spec.first_at_s
    while spec.kinds and at <= spec.last_at_s:
        if not deck:
            deck = list(spec.kinds)
            rng.shuffle(deck)
        kind = deck.pop()
        hold = hold_for(kind, spec, rng)
        planned.append(PlannedFault(kind, rng.choice(targets(kind, cluster_roles)), at, hold))
        at += rng.uniform(*spec.every_s)
    return planned
