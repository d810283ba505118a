"""The dispatcher: reads only the due slice of each owned shard, holds the next few seconds in
memory, and publishes each task at its due instant.

Per shard it keeps a cursor (persisted: every index row with second <= cursor was handed to
the ready queue) and reads rows after it. The cursor trails the clock by ``late_write_grace_s``
so that a task written slightly late (clock skew between server and dispatcher, write latency)
into an already-scanned second is still found by a periodic rescan from the cursor; rows seen
since the cursor are remembered so a rescan publishes nothing twice. The cursor moves only
after the queue acknowledged every row at or before it, so a crash re-sends and never loses.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from dispatcher.ownership import Ownership
from dispatcher.ready_queue import ReadyQueue
from dispatcher.schedule_steps import ScheduleStepper
from tikk.buckets import second_of
from tikk.clock import Clock
from tikk.errors import BackendUnavailable
from tikk.model import Cursor, DueEntry
from tikk.store import TaskStore
from tikk.telemetry import ShardGauge, Telemetry

log = logging.getLogger("tikk.dispatcher")


@dataclass(frozen=True)
class DispatchSettings:
    """Timing of the dispatcher. Defaults suit the embedded store and a second-level SLA."""

    # Longest sleep between ticks when nothing is due sooner.
    poll_interval_ms: int = 100
    # How far ahead of now rows are read into memory.
    prefetch_ms: int = 2_000
    # Re-read the current second this often, to catch tasks created already due.
    rescan_interval_ms: int = 250
    # The cursor trails now by this much; rows written up to this late are still fired.
    late_write_grace_s: int = 5
    # Rows per store read.
    scan_limit: int = 2_000
    # Schedules stepped per pass; the occurrences of one pass go out before the next.
    max_steps: int = 500
    # Upper bound on rows held in memory (catch-up after downtime proceeds in slices).
    max_held: int = 200_000
    # How often moved cursors are written to the store (all shards in one write).
    cursor_flush_interval_ms: int = 1_000
    # Wait after a backend failure before the next tick.
    error_backoff_ms: int = 500


@dataclass
class _ShardState:
    epoch: int
    cursor: int
    # Resume position of the regular scan, and the last second read completely.
    scan_from: tuple[int, str]
    complete_through: int
    # Row identity → second of rows seen after the cursor (held, in flight or sent).
    seen: dict[tuple[str, int, int], int] = field(default_factory=dict)
    # Same keys for rows not yet acknowledged by the queue.
    unacked: dict[tuple[str, int, int], int] = field(default_factory=dict)
    last_rescan_ms: int = 0
    last_deep_rescan_ms: int = 0
    flushed_cursor: int = 0


@dataclass
class DispatchStats:
    """Counters for logs, metrics and tests."""

    published: int = 0
    skipped: int = 0
    schedule_steps: int = 0
    publish_failures: int = 0
    lateness_ms: list[int] = field(default_factory=list)


def _row_key(e: DueEntry) -> tuple[str, int, int]:
    """A row's identity: a retry (next attempt) or a re-drive (new due time) is a new row."""
    return (e.key, e.attempt, e.due_ms)


class Dispatcher:
    """Moves due tasks of the owned shards from the task store into the ready queue."""

    def __init__(
        self,
        store: TaskStore,
        queue: ReadyQueue,
        ownership: Ownership,
        clock: Clock,
        *,
        settings: DispatchSettings | None = None,
        keep_lateness_samples: int = 0,
        telemetry: Telemetry | None = None,
        schedules: ScheduleStepper | None = None,
    ) -> None:
        self._store = store
        self._queue = queue
        self._ownership = ownership
        self._clock = clock
        self._settings = settings or DispatchSettings()
        self._shards: dict[int, _ShardState] = {}
        self._held: list[tuple[int, int, DueEntry]] = []
        self._seq = itertools.count()
        self._last_flush_ms = 0
        self._keep_samples = keep_lateness_samples
        self._telemetry = telemetry or Telemetry()
        self._schedules = schedules
        self.stats = DispatchStats()

    async def run(self, stop: asyncio.Event) -> None:
        """Tick until ``stop`` is set, sleeping until the next due instant or poll."""
        while not stop.is_set():
            now = self._clock.now_ms()
            try:
                wake = await self.tick(now)
            except BackendUnavailable as exc:
                log.warning("dispatch tick failed, retrying: %s", exc)
                wake = now + self._settings.error_backoff_ms
            delay = max(0, wake - self._clock.now_ms()) / 1000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
        await self._flush_cursors(self._clock.now_ms(), force=True)

    async def tick(self, now_ms: int) -> int:
        """One step at instant ``now_ms``: sync ownership, scan, fire what is due, move the
        cursors. Returns the instant of the next step."""
        await self._sync_ownership(self._ownership.owned())
        # Shards are scanned concurrently: each read is a small, independent partition slice.
        await asyncio.gather(*(self._scan(shard, now_ms) for shard in list(self._shards)))
        await self._fire(now_ms)
        await self._flush_cursors(now_ms)
        next_poll = now_ms + self._settings.poll_interval_ms
        return min(self._held[0][0], next_poll) if self._held else next_poll

    @property
    def held(self) -> int:
        return len(self._held)

    async def _sync_ownership(self, owned: Mapping[int, int]) -> None:
        for shard in [s for s, st in self._shards.items() if owned.get(s) != st.epoch]:
            del self._shards[shard]
        for shard, epoch in owned.items():
            if shard not in self._shards:
                cursor = await self._store.get_cursor(shard)
                self._shards[shard] = _ShardState(
                    epoch=epoch,
                    cursor=cursor.second,
                    scan_from=(cursor.second + 1, ""),
                    complete_through=cursor.second,
                    flushed_cursor=cursor.second,
                )

    async def _scan(self, shard: int, now_ms: int) -> None:
        st = self._shards[shard]
        s = self._settings
        start = st.scan_from
        if now_ms - st.last_deep_rescan_ms >= s.late_write_grace_s * 1000:
            st.last_deep_rescan_ms = st.last_rescan_ms = now_ms
            start = (st.cursor + 1, "")
        elif now_ms - st.last_rescan_ms >= s.rescan_interval_ms:
            st.last_rescan_ms = now_ms
            start = min(start, (max(st.cursor + 1, second_of(now_ms) - 1), ""))
        until = second_of(now_ms + s.prefetch_ms)
        while len(self._held) < s.max_held:
            rows = await self._store.read_due(shard, start, until, s.scan_limit)
            for row in rows:
                self._hold(st, row)
            if len(rows) < s.scan_limit:
                st.scan_from = max(st.scan_from, (until + 1, ""))
                st.complete_through = max(st.complete_through, until)
                return
            start = rows[-1].position
            st.scan_from = max(st.scan_from, start)
            st.complete_through = max(st.complete_through, start[0] - 1)

    def _hold(self, st: _ShardState, row: DueEntry) -> None:
        key = _row_key(row)
        if key in st.seen or row.second <= st.cursor:
            return
        st.seen[key] = st.unacked[key] = row.second
        heapq.heappush(self._held, (row.due_ms, next(self._seq), row))

    def _pop_due(self, now_ms: int) -> list[DueEntry]:
        batch: list[DueEntry] = []
        while self._held and self._held[0][0] <= now_ms:
            _, _, entry = heapq.heappop(self._held)
            st = self._shards.get(entry.shard)
            if st is not None and _row_key(entry) in st.unacked:
                batch.append(entry)
        return batch

    async def _fire(self, now_ms: int) -> None:
        batch = self._pop_due(now_ms)
        ticks = [e for e in batch if e.is_tick]
        if ticks:
            batch = [e for e in batch if not e.is_tick]
            # Many schedules due at once: step a slice, publish it, and come back at once for
            # the rest, so the first occurrences go out without waiting for the last.
            later = ticks[self._settings.max_steps :]
            try:
                await self._step_schedules(ticks[: self._settings.max_steps], now_ms)
            except BackendUnavailable:
                self._hold_again([*ticks, *batch])
                raise
            # Stepping many schedules takes time: stamp what goes out with the real instant.
            now_ms = max(now_ms, self._clock.now_ms())
            more = self._pop_due(now_ms)  # the occurrences just created, and ticks due again
            batch += [e for e in more if not e.is_tick]
            self._hold_again([*later, *(e for e in more if e.is_tick)])
        if not batch:
            return
        try:
            ready = await self._store.mark_dispatched(batch, now_ms)
            with self._telemetry.dispatching(ready, now_ms) as deliveries:
                await self._queue.publish(deliveries)
        except BackendUnavailable:
            self.stats.publish_failures += 1
            self._hold_again(batch)
            raise
        self._acknowledge(batch, ready, now_ms)

    def _hold_again(self, entries: list[DueEntry]) -> None:
        """Put popped rows back: they are still unacknowledged and must go out later."""
        for entry in entries:
            heapq.heappush(self._held, (entry.due_ms, next(self._seq), entry))

    async def _step_schedules(self, ticks: list[DueEntry], now_ms: int) -> None:
        written: list[DueEntry] = []
        if self._schedules is not None:
            written = await self._schedules.step_all(ticks, now_ms)
        else:
            log.warning("%d schedule tick(s) due but no schedule store configured", len(ticks))
        horizon = now_ms + self._settings.prefetch_ms
        for row in written:
            st = self._shards.get(row.shard)
            # Rows further out are found by the scan when their bucket comes up.
            if st is not None and row.due_ms <= horizon:
                self._hold(st, row)
        for tick in ticks:
            st = self._shards.get(tick.shard)
            if st is not None:
                st.unacked.pop(_row_key(tick), None)
        self.stats.schedule_steps += len(ticks)

    def _acknowledge(self, batch: list[DueEntry], ready: list[DueEntry], now_ms: int) -> None:
        for entry in batch:
            st = self._shards.get(entry.shard)
            if st is not None:
                st.unacked.pop(_row_key(entry), None)
        self.stats.published += len(ready)
        self.stats.skipped += len(batch) - len(ready)
        if self._keep_samples:
            self.stats.lateness_ms.extend(now_ms - e.due_ms for e in ready)
            del self.stats.lateness_ms[: -self._keep_samples]

    def _gauges(self, now_ms: int) -> dict[int, ShardGauge]:
        return {
            shard: ShardGauge(
                backlog=sum(1 for key in st.unacked if key[2] <= now_ms),
                cursor_lag_s=max(0, second_of(now_ms) - st.cursor),
            )
            for shard, st in self._shards.items()
        }

    async def _flush_cursors(self, now_ms: int, force: bool = False) -> None:
        grace_s = self._settings.late_write_grace_s
        for st in self._shards.values():
            limit = min(second_of(now_ms) - grace_s, st.complete_through)
            if st.unacked:
                limit = min(limit, min(st.unacked.values()) - 1)
            if limit > st.cursor:
                st.cursor = limit
                st.seen = {k: sec for k, sec in st.seen.items() if sec > limit}
        if not force and now_ms - self._last_flush_ms < self._settings.cursor_flush_interval_ms:
            return
        if self._telemetry.enabled:
            self._telemetry.report_shards(self._gauges(now_ms))
        moves = {
            shard: Cursor(st.cursor, st.epoch)
            for shard, st in self._shards.items()
            if st.cursor > st.flushed_cursor
        }
        if not moves:
            return
        # One write for every owned shard: cheap even when it is a consensus round.
        refused = await self._store.advance_cursors(moves)
        self._last_flush_ms = now_ms
        for shard, move in moves.items():
            if shard in refused:
                log.warning("shard %d taken over by a newer owner; dropping it", shard)
                del self._shards[shard]
            else:
                self._shards[shard].flushed_cursor = move.second
