"""Rolling restarts: every process and node of a replicated deployment restarted one at a
time while tasks fire, as an upgrade or a configuration change does, and a schema migration
applied to the live cluster halfway.

The order is an operator's: the Cassandra nodes, the Kafka brokers and the ZooKeeper servers
one by one (each stopped with SIGTERM, so it leaves cleanly, and started again; the next only
once it answers), then a schema step on the live keyspace, then tikk's servers, dispatchers
and workers, each sent SIGTERM and started again once it has exited. Unlike a fault nothing
here is abrupt: what it costs is what a planned restart costs, and the targets hold for it
(nothing lost, nothing early, lateness as under one fault).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from devtools import stack
from devtools.faults.nemesis import PlannedFault
from devtools.faults.records import FaultKind


@dataclass(frozen=True)
class RollingSpec:
    """Every node of the replicated stack, then every tikk process, restarted in turn from
    ``first_at_s``, ``gap_s`` apart at least (a restart that takes longer delays the next),
    with the live migration (``Cluster.migrate_live``) between the nodes and the processes."""

    first_at_s: float
    gap_s: float = 4.0
    nodes: bool = True

    @property
    def service_faults(self) -> bool:
        return self.nodes

    def without_service_faults(self) -> RollingSpec:
        return replace(self, nodes=False)

    def plan(self, rng: random.Random, cluster_roles: dict[str, list[str]]) -> list[PlannedFault]:
        """The restarts in order (``rng`` is not drawn from: the order is fixed)."""
        targets: list[tuple[FaultKind, str]] = []
        if self.nodes:
            for name in stack.SERVICE_NAMES:
                targets += [(FaultKind.RESTART_NODE, n.label) for n in stack.nodes(name, 3)]
            targets.append((FaultKind.MIGRATE_SCHEMA, "cassandra"))
        for kind in ("server", "dispatcher", "worker"):
            targets += [(FaultKind.RESTART_PROCESS, role) for role in cluster_roles[kind]]
        return [
            PlannedFault(kind, target, self.first_at_s + i * self.gap_s, 0.0)
            for i, (kind, target) in enumerate(targets)
        ]
