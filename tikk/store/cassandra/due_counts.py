"""Due counts on Cassandra; semantics in ``tikk.store.due_counts``.

A counter table (``schema`` step 10) partitioned by (namespace, day of the minute): the next
hour reads one partition slice, two across midnight. Counter updates are not idempotent; a
flush that fails is merged back into the server's pending counts and sent again, so a flush
whose answer was lost may count twice (a view, not a ledger).
"""

from __future__ import annotations

from collections.abc import Sequence

from tikk.drivers.cassandra import CassandraSession
from tikk.store.due_counts import DueCount, DueDeltas

_MINUTES_A_DAY = 1_440
_ADD = (
    "UPDATE due_counts SET tasks = tasks + ? WHERE namespace = ? AND day = ? AND minute = ?"
    " AND queue = ?"
)
_READ = (
    "SELECT minute, queue, tasks FROM due_counts WHERE namespace = ? AND day = ?"
    " AND minute >= ? AND minute <= ?"
)


class CassandraDueCountStore:
    """``DueCountStore`` on a keyspace; ``session`` may be shared with the other backends of
    the keyspace (``start``/``close`` count its users)."""

    def __init__(self, session: CassandraSession) -> None:
        self._db = session

    async def add(self, deltas: DueDeltas) -> None:
        await self._db.execute_many([
            self._db.bind(_ADD, [d, ns, minute // _MINUTES_A_DAY, minute, queue])
            for (ns, minute, queue), d in deltas.items() if d
        ])  # fmt: skip

    async def counts(
        self, namespace: str, first_minute: int, last_minute: int
    ) -> Sequence[DueCount]:
        days = range(first_minute // _MINUTES_A_DAY, last_minute // _MINUTES_A_DAY + 1)
        answers = await self._db.execute_many([
            self._db.bind(_READ, [namespace, day, first_minute, last_minute]) for day in days
        ])  # fmt: skip
        found = [DueCount(int(r.minute), str(r.queue), int(r.tasks or 0))
                 for rows in answers for r in rows]  # fmt: skip
        return [c for c in found if c.tasks > 0]

    async def start(self) -> None:
        await self._db.start()

    async def close(self) -> None:
        await self._db.close()
