"""The interface every system under test implements for the runner: started in a fleet,
fed one plan of tasks, closed. One object serves one run of one workload."""

from __future__ import annotations

from typing import Protocol

from devtools.peers.processes import PeerFleet
from devtools.peers.workloads import TaskPlan


class PeerSystem(Protocol):
    """One system under test for one run."""

    name: str
    # Tasks per second it is expected to take while creating them, before any was measured:
    # the first tasks are due after the time creating them all should take, and some more.
    expected_ingest_per_s: float

    def start(self, fleet: PeerFleet) -> None:
        """Start the system's processes in ``fleet`` and wait until they take tasks.
        Raises ``RuntimeError`` when one exits or is not ready in its bounded time. Called
        once; the fleet stops the processes whatever happens."""
        ...

    def submit(self, plan: TaskPlan) -> float:
        """Create every task of ``plan`` the way the system is used to run a task at a time;
        the seconds creating them took. Raises ``RuntimeError`` if the system refused any.
        Not idempotent: called once per run."""
        ...

    def close(self) -> None:
        """Release the runner's own connections to the system (not its processes).
        Idempotent, and safe when ``start`` failed."""
        ...
