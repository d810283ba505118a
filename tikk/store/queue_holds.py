"""The queue-hold store: each queue's ``tikk.queue_holds.QueueControl``, and the rows parked
while a queue is paused or over its rate, by queue and shard in due order.

The owner of a shard parks and releases that shard's rows, and parked rows need no fence
of their own. A row released twice (an owner that died between publishing and ``unpark``) is
claimed again by ``TaskStore.mark_dispatched``, which sends it again at most
(at-least-once), and a row whose task was cancelled, moved or finished meanwhile is not
claimed at all. An owner that lost a shard may park one more row before it knows; the row
is not lost: if the new owner read the cursor before the old one moved it past the row, it
reads the row from the due index itself (the parked copy is at worst sent once more when its
lane is next read), and if after, the row was parked before the new owner took the shard and
is found by its first read of the lane.

Backends: ``tikk.store.sqlite.queue_holds``, ``tikk.store.cassandra.queue_holds``. Every
method may raise ``BackendUnavailable``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from tikk.model import DueEntry
from tikk.queue_holds import QueueControl

# A parked row's place in its listing: (due time, task key).
ParkedPosition = tuple[int, str]
# Before every parked row.
FIRST: ParkedPosition = (-(2**62), "")


def parked_position(e: DueEntry) -> ParkedPosition:
    return (e.due_ms, e.key)


class QueueHoldStore(Protocol):
    """Queue controls and parked rows, in the task store's database."""

    async def controls(self) -> dict[str, QueueControl]:
        """Every queue's control ever written, by queue name (a handful: one per queue an
        operator touched)."""
        ...

    async def set_control(self, control: QueueControl) -> None:
        """Write a queue's control, replacing the one stored (last write wins)."""
        ...

    async def park(self, entries: Sequence[DueEntry]) -> None:
        """Park these due rows, each in its queue's and shard's listing; a row parked again
        (same task, attempt and due time) is written once."""
        ...

    async def read_parked(
        self, queue: str, shard: int, after: ParkedPosition, limit: int
    ) -> list[DueEntry]:
        """Up to ``limit`` parked rows of ``queue`` in ``shard`` after position ``after``, in
        due order."""
        ...

    async def unpark(self, entries: Sequence[DueEntry]) -> None:
        """Remove these rows from their listings (released, skipped, or stale)."""
        ...

    async def count_parked(self, queue: str, most: int) -> int:
        """How many rows of ``queue`` are parked across all shards, counting up to ``most``
        (a count bounded in cost: the listing may hold millions)."""
        ...

    async def skip(self, entries: Sequence[DueEntry], reason: str, now_ms: int) -> list[DueEntry]:
        """Cancel the task of each parked row that still fires it (SCHEDULED at the row's
        attempt and due time), with error type ``SKIPPED`` and message ``reason``; the rows
        whose task was skipped. A claim, a cancel or a move written after the task was read
        outranks the skip, as it outranks a dispatcher's claim."""
        ...

    async def start(self) -> None:
        """Open connections and files (nothing is opened by the constructor)."""
        ...

    async def close(self) -> None: ...
