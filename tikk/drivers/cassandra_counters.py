"""Counter updates gathered in memory and written in the background: one update per counter
and flush, never one per request, and never awaited by the request that made the change.

Why not in the request: Cassandra moves a counter through a leader replica it picks among
the replicas gossip still calls up. For the ~19 s after a node of three dies and before
gossip convicts it (``phi_convict_threshold`` 8 at about one heartbeat a second), about a
third of counter updates went to the dead leader and failed after
``counter_write_request_timeout`` (5 s), each holding one of the coordinator's request
threads meanwhile; plain reads, writes and conditional writes at ``LOCAL_QUORUM`` through the
same window stayed under 250 ms (measured on the three-node stack). A request that awaited
its counter update was late by up to those 5 s, and the held threads made every other request
of that coordinator late too.

What is lost: deltas added less than a flush before a crash, and a flush's deltas when it
may have applied but was not confirmed (a timeout: sent again it could count twice). Each
lost flush is logged with the counter and the delta. Deltas whose update certainly did not
apply (``Unavailable``, no node reached) are kept for the next flush.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol

from cassandra import Unavailable
from cassandra.cluster import NoHostAvailable

from tikk.errors import BackendUnavailable

log = logging.getLogger("tikk.store")

# How often the gathered deltas are written. A counter read through ``settled`` is exact in
# this process at any time; other processes see a change at most about this much later.
FLUSH_S = 0.5
# How long ``stop`` waits for the last flush before it gives the deltas up (logged).
STOP_WAIT_S = 6.0

Key = tuple[str, tuple[Any, ...]]  # (the update statement, the key values after its delta)


class CounterWriter(Protocol):
    """What the tally needs of a session (``CassandraSession`` has it)."""

    def bind(self, cql: str, params: Sequence[Any]) -> Any: ...

    async def execute_many(self, statements: Sequence[Any]) -> list[list[Any]]: ...


class CounterTally:
    """The counter deltas of one session not yet confirmed written. Statements take the delta
    as their first parameter and the counter's key as the rest, e.g.
    ``UPDATE t SET n = n + ? WHERE k = ?``."""

    def __init__(self, db: CounterWriter, flush_s: float = FLUSH_S) -> None:
        self._db = db
        self._flush_s = flush_s
        self._pending: Counter[Key] = Counter()
        self._sending: Counter[Key] = Counter()
        # One flush at a time; a reader holds it too, so a flush neither starts nor ends
        # between its read of the stored value and its look at ``unconfirmed``.
        self._lock = asyncio.Lock()
        self._stopping = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None

    def add(self, cql: str, key: Sequence[Any], delta: int) -> None:
        """Move the counter ``key`` of ``cql`` by ``delta``: written by a later flush."""
        if delta:
            self._pending[(cql, tuple(key))] += delta

    def unconfirmed(self, cql: str, key: Sequence[Any]) -> int:
        """The delta of counter ``key`` added here and not yet confirmed written: to add to a
        stored value read inside ``settled``."""
        counter = (cql, tuple(key))
        return self._pending[counter] + self._sending[counter]

    @contextlib.asynccontextmanager
    async def settled(self, wait_s: float) -> AsyncIterator[None]:
        """Hold flushes off while the caller reads a stored counter, so that the stored value
        plus ``unconfirmed`` counts each delta once. Waits at most ``wait_s`` for a flush under
        way (one to a dead leader takes 5 s); past that the read goes on beside it, and counts
        that flush's deltas twice if they apply before the read."""
        try:
            await asyncio.wait_for(self._lock.acquire(), wait_s)
        except TimeoutError:
            yield
            return
        try:
            yield
        finally:
            self._lock.release()

    async def flush(self) -> None:
        """Write what was added so far, one update per counter, side by side."""
        async with self._lock:
            self._sending, self._pending = self._pending, Counter()
            sent = [c for c, d in self._sending.items() if d]
            try:
                outcomes = await asyncio.gather(
                    *(self._write(c, self._sending[c]) for c in sent), return_exceptions=True
                )
                for counter, outcome in zip(sent, outcomes, strict=True):
                    if isinstance(outcome, BaseException):
                        self._failed(counter, self._sending[counter], outcome)
            finally:
                self._sending = Counter()

    async def _write(self, counter: Key, delta: int) -> None:
        cql, key = counter
        await self._db.execute_many([self._db.bind(cql, [delta, *key])])

    def _failed(self, counter: Key, delta: int, exc: BaseException) -> None:
        if _not_applied(exc):
            self._pending[counter] += delta
            log.info("counter update refused (%s); kept for the next flush", exc)
            return
        cql, key = counter
        table = _TABLE.search(cql)
        name = table.group(1) if table else "?"
        log.warning(
            "counter %s%s moved by %+d not confirmed (%s): it may or may not have applied",
            name,
            list(key),
            delta,
            exc,
        )

    def start(self) -> None:
        """Flush about every ``flush_s`` in a task of the running loop, until ``stop``."""
        if self._runner is None:
            self._stopping.clear()
            self._runner = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Flush once more and end the background flushes (waits at most ``STOP_WAIT_S``)."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        self._stopping.set()
        try:
            await asyncio.wait_for(runner, STOP_WAIT_S)
        except TimeoutError:
            log.warning("counter deltas not written at stop: %s", dict(self._pending))

    async def _run(self) -> None:
        last = False
        while not last:  # the flush after ``stop`` is the last
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self._flush_s)
            last = self._stopping.is_set()
            await self.flush()


_TABLE = re.compile(r"\bUPDATE\s+(\S+)", re.IGNORECASE)


def _not_applied(exc: BaseException) -> bool:
    """Whether the update certainly did not apply: refused before it was sent, or refused by
    the coordinator for want of live replicas, or no node reached at all."""
    if not isinstance(exc, BackendUnavailable):
        return False
    cause = exc.__cause__
    return cause is None or isinstance(cause, Unavailable | NoHostAvailable)
