"""The quota store interface: each namespace's quotas, and the usage the task store keeps.

A namespace's quotas are set by an admin and read by every server process through a short
cache (``server.ops.quotas``), so a change applies without a restart. Usage ("tasks stored": tasks
not finished yet, i.e. scheduled, dispatched or waiting for a retry) is counted by the task
store of the same database as tasks are created and finish:

- SQLite: exact, by triggers in the same transaction as the task row.
- Cassandra: a counter per namespace, moved after the task rows are written, in the
  background: each process gathers its changes and writes them about twice a second
  (``tikk.drivers.cassandra_counters``), and its own reads add what it has not written yet,
  so another process sees a change up to about half a second later. A process that dies
  with changes not yet written, or an update that may have applied but was not confirmed (a
  timeout; logged, not sent again), leaves the counter off by those changes (too low after
  creates, too high after finishes), and a task whose row expires unfinished (its retention
  ran out) is never subtracted. Both errors are bounded by what the lost changes held; a
  recount (``count_open``, then ``put_usage``) corrects a drifted counter from the task rows.

The per-second rate is drawn from a row per namespace and second that every server process
takes from (``draw_rate``), so processes on separate hosts admit the rate together, not each.

Backends: ``tikk.store.sqlite.quotas``, ``tikk.store.cassandra.quotas``. Every method may raise
``BackendUnavailable``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from tikk.quotas import NamespaceQuotas, NamespaceUsage


@dataclass(frozen=True)
class OpenCount:
    """One part of a recount: the namespace's unfinished tasks found, the task rows read to
    find them, and the part to count next (-1: none, the count is whole)."""

    open_tasks: int
    read: int
    next_part: int


class QuotaStore(Protocol):
    """Quotas by namespace, in the task store's database. Safe to share between coroutines
    of one event loop."""

    async def get(self, namespace: str) -> NamespaceQuotas:
        """The namespace's stored quotas; all ``None`` if none were ever set."""
        ...

    async def put(self, namespace: str, quotas: NamespaceQuotas, now_ms: int) -> None:
        """Replace the namespace's quotas (a ``None`` field clears that quota). Idempotent;
        the last write wins."""
        ...

    async def usage(self, namespace: str) -> NamespaceUsage:
        """The namespace's usage as counted by the task store (see the module docstring for
        how exact it is on each backend). Never negative."""
        ...

    async def count_open(self, namespace: str, part: int) -> OpenCount:
        """Count the namespace's unfinished tasks in one part of the task rows, from part 0
        until ``next_part`` is -1; the sum is the repair of a drifted count (``put_usage``).
        Each call's cost is bounded whatever is stored (on Cassandra, a few token ranges of
        the task table read in pages, never a filtered scan). Tasks created or finished
        meanwhile may leave the sum off by their own number."""
        ...

    async def draw_rate(self, namespace: str, second: int, wanted: int, per_second: int) -> int:
        """Take up to ``wanted`` of the ``per_second`` creates the namespace may make in the
        whole second ``second`` (since the epoch), counted for every server process on this
        database together; return how many were granted (0 once that second is spent).
        What is granted stays taken, used or not; a write that fails may have taken what it
        did not report (a limit errs towards admitting less)."""
        ...

    async def namespaces(self) -> Sequence[str]:
        """Every namespace that ever had a task or quotas of its own (few: one row each)."""
        ...

    async def put_usage(self, namespace: str, usage: NamespaceUsage) -> None:
        """Correct the stored usage to ``usage`` (a repair after a counted drift; writes
        racing it may leave the counter off by their own tasks)."""
        ...

    async def start(self) -> None:
        """Open connections and files (nothing is opened by the constructor)."""
        ...

    async def close(self) -> None:
        """Release what ``start`` opened; idempotent."""
        ...
