"""The due-count store: how many tasks fall due in each minute, per namespace and queue.

What the console's "upcoming" view reads: the next hour is 60 minutes by the queues, one small
read whatever number of tasks is stored. The server counts as it writes (a create, a retry,
a re-drive adds one at the attempt's due minute; a cancel takes one off) and adds its counts
up in memory for about a second before writing them (``server.ops.upcoming``), so the
hot path pays no write per task.

The counts are a view, not a ledger: a server that dies loses its last second of counts; a
schedule's occurrence is counted once it is created (at its fire time), not ahead; an
attempt moved by a late write stays counted at the minute it was due. Minutes in the past
are never read.

Backends: ``tikk.store.sqlite.due_counts``, ``tikk.store.cassandra.due_counts``. Every method
may raise ``BackendUnavailable``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

MINUTE_MS = 60_000


@dataclass(frozen=True)
class DueCount:
    """Tasks of ``queue`` due in the minute starting at ``minute * 60 s``."""

    minute: int
    queue: str
    tasks: int


# (namespace, minute, queue) → change of its count.
DueDeltas = Mapping[tuple[str, int, str], int]


class DueCountStore(Protocol):
    """Per-minute counts of due tasks, in the task store's database."""

    async def add(self, deltas: DueDeltas) -> None:
        """Add each delta to its count (not idempotent: a repeat counts twice)."""
        ...

    async def counts(
        self, namespace: str, first_minute: int, last_minute: int
    ) -> Sequence[DueCount]:
        """The counts of the namespace's minutes ``first_minute..last_minute`` (both included),
        by minute then queue; a minute or queue with no task is left out."""
        ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...
