"""What is due in the coming minutes: counted as the server writes, read by the console.

``UpcomingCounts`` keeps the changes of the per-minute due counts (``tikk.store.due_counts``)
in memory and writes them about once a second, so a create pays no extra write: a thousand
creates a second due in one minute of one queue cost one counter update a second. A flush
that fails keeps its changes for the next. What a read returns adds this process's unwritten
changes to the stored counts.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Iterable

from tikk.clock import Clock
from tikk.errors import BackendUnavailable
from tikk.model import Task, TaskState
from tikk.store.due_counts import MINUTE_MS, DueCount, DueCountStore

log = logging.getLogger("tikk.server")
_FLUSH_S = 1.0
# Distinct (namespace, minute, queue) changes kept while the store does not answer; beyond
# it the oldest are dropped (the view drifts, nothing else depends on it).
_MAX_PENDING = 100_000


class UpcomingCounts:
    """The server's changes of the due counts, and the reads of the coming minutes."""

    def __init__(self, store: DueCountStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self._pending: Counter[tuple[str, int, str]] = Counter()

    def scheduled(self, tasks: Iterable[Task], delta: int = 1) -> None:
        """``tasks`` now wait for their due time (``delta`` 1), or no longer do (-1)."""
        for t in tasks:
            if t.state is TaskState.SCHEDULED or delta < 0:
                self._pending[(t.namespace, t.due_ms // MINUTE_MS, t.queue)] += delta
        while len(self._pending) > _MAX_PENDING:
            del self._pending[next(iter(self._pending))]

    async def flush(self) -> None:
        """Write the changes so far; on failure they stay for the next flush."""
        batch, self._pending = self._pending, Counter()
        try:
            await self._store.add(batch)
        except BaseException:
            self._pending.update(batch)
            raise

    async def run(self) -> None:
        """Flush about once a second until cancelled (then once more)."""
        try:
            while True:
                await asyncio.sleep(_FLUSH_S)
                try:
                    await self.flush()
                except BackendUnavailable as exc:
                    log.info("due counts not written (%s); kept for the next try", exc)
        finally:
            if self._pending:
                await asyncio.shield(self._quiet_flush())

    async def _quiet_flush(self) -> None:
        try:
            await self.flush()
        except BackendUnavailable:
            log.info("due counts of the last second lost at stop")

    async def coming(self, namespace: str, minutes: int) -> list[DueCount]:
        """The counts of the namespace's next ``minutes`` whole minutes. Not the current one:
        its tasks are being dispatched now, and a count does not drop when a task runs."""
        first = self._clock.now_ms() // MINUTE_MS + 1
        last = first + minutes - 1
        stored = await self._store.counts(namespace, first, last)
        total = Counter({(c.minute, c.queue): c.tasks for c in stored})
        for (ns, minute, queue), delta in self._pending.items():
            if ns == namespace and first <= minute <= last:
                total[(minute, queue)] += delta
        return [DueCount(m, q, n) for (m, q), n in sorted(total.items()) if n > 0]
