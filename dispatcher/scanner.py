"""The dispatcher: reads only the due slice of each owned shard, holds the next few seconds in
memory, and publishes each task at its due instant (or ``lead_ms`` before it; its worker
then starts it at the due instant).

Per shard it keeps a cursor (persisted: every index row with second <= cursor was handed to
the ready queue) and reads rows after it in three ways:

* the **forward scan** reads ahead of the clock (``prefetch_ms``), so tasks are in memory
  before they are due;
* the **rescan** re-reads from the last second up to one interval ahead every
  ``rescan_interval_ms``, so a task created "due now" goes out within that interval, and one
  created due inside the window already read is read again before it is due;
* the **sweep** is what makes late writes safe. A row may become visible after its second was
  read: written by a server whose clock lags, or slowly. A second ``S`` counts as *swept* only
  once a read of it began at or after ``(S + 1) s + late_write_grace_s`` by this dispatcher's
  clock, so every row whose write completed less than the grace period after its due time was
  visible to that read. The sweep reads each second once, right after its grace has passed.

The cursor moves to the last swept second, never past a row that the queue has not
acknowledged, and an owner that lost the shard (fenced by its epoch) cannot move it. A new
owner starts at the cursor, so nothing written within the grace period is lost through a
takeover, a kill or a pause. Rows seen after the cursor are remembered so no re-read publishes
twice; rows the queue accepted are marked *handed off* in the store, so a new owner re-sends
only those whose hand-off was not recorded (in flight when the old owner died); the rescan
and the sweep leave them out (rebuilding rows only to skip them was most of their cost).

Queues are published independently: a queue that refuses deliveries is retried with backoff
while the other queues' tasks go out.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections import defaultdict
from collections.abc import Mapping

from dispatcher.ownership import Ownership
from dispatcher.pacing import FIRE_WINDOW_MS, FireBatches, Wakeup, run_loops
from dispatcher.queue_backoff import QueueBackoffs
from dispatcher.queue_gates import QueueGates
from dispatcher.schedule_steps import ScheduleStepper
from dispatcher.shard_state import ShardState, row_key, shard_gauges, write_cursors
from dispatcher.stats import DispatchStats
from tikk.buckets import second_of
from tikk.clock import Clock
from tikk.delivery_tokens import DeliveryKeys
from tikk.errors import BackendUnavailable
from tikk.model import Delivery, DueEntry
from tikk.ready_queue import ReadyQueue
from tikk.settings import DispatchSettings
from tikk.start_expiry import StartExpiry
from tikk.store.queue_holds import QueueHoldStore
from tikk.store.tasks import TaskStore
from tikk.telemetry import Telemetry

log = logging.getLogger("tikk.dispatcher")


def _past_start_deadline(e: DueEntry, now_ms: int) -> bool:
    return e.start_timeout_ms > 0 and now_ms >= e.due_ms + e.start_timeout_ms


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
        expiry: StartExpiry | None = None,
        keys: DeliveryKeys | None = None,
        holds: QueueHoldStore | None = None,
    ) -> None:
        """``keys`` sign every delivery published (servers refuse results of unsigned ones;
        only tests of dispatching alone leave them out). ``holds``: paused queues (gates)."""
        self._store = store
        self._queue = queue
        self._ownership = ownership
        self._clock = clock
        self._settings = settings or DispatchSettings()
        self._shards: dict[int, ShardState] = {}
        self._fenced: dict[int, int] = {}  # shard → epoch refused: not taken again at it
        # (fire at, sequence, row): the due instant, or a queue's retry time after a failure.
        self._held: list[tuple[int, int, DueEntry]] = []
        self._seq, self._last_flush_ms = itertools.count(), 0
        self._fire_wakeup = Wakeup()
        self._batches = FireBatches(self._settings.error_backoff_ms, self._fire_wakeup.set)
        self._window_ms = min(FIRE_WINDOW_MS, self._settings.lead_ms)  # workers hold early rows
        self._backoff = QueueBackoffs(
            self._settings.error_backoff_ms, self._settings.max_queue_backoff_ms
        )
        self._keep_samples = keep_lateness_samples
        self._telemetry = telemetry or Telemetry()
        self._schedules = schedules
        self._expiry = expiry
        self._keys = keys
        self.gates = QueueGates(holds, store.shard_count, self._settings) if holds else None
        self.stats = DispatchStats()

    async def run(self, stop: asyncio.Event) -> None:
        """Read and fire until ``stop`` is set, in two loops apart (``dispatcher.pacing``)."""
        await run_loops(
            self._read_step,
            self._fire_step,
            fire_wakeup=self._fire_wakeup,
            clock=self._clock,
            stop=stop,
            error_backoff_ms=self._settings.error_backoff_ms,
        )
        await self._batches.drain()
        await self.close(self._clock.now_ms())

    async def close(self, now_ms: int) -> None:
        """Stop cleanly: write the cursors as they stand."""
        await self._flush_cursors(now_ms, force=True)
        self.stats.log_reads(now_ms, 0)

    async def tick(self, now_ms: int) -> int:
        """A read step, then a fire step, at instant ``now_ms`` (how tests and tools drive
        the dispatcher, with a manual clock). Returns the instant of the next step."""
        next_read = await self._read_step(now_ms, fire=True)
        return min(self._held[0][0], next_read) if self._held else next_read

    async def _read_step(self, now_ms: int, *, fire: bool = False) -> int:
        """Sync ownership, read what is due to be read (``now_ms`` is taken before any store
        access, which the sweep relies on), ``fire`` (a tick), write the cursors back."""
        await self._sync_ownership(self._ownership.owned())
        if self.gates is not None:
            await self._release(self.gates, now_ms)
        # Shards are scanned concurrently: each read is a small, independent partition slice.
        # Most steps find nothing to read on most shards, and those are not visited at all.
        due = [shard for shard, st in self._shards.items() if self._scan_due(st, now_ms)]
        await asyncio.gather(*(self._scan(shard, now_ms) for shard in due))
        if fire:
            await self._fire(now_ms)
        await self._flush_cursors(now_ms)
        self.stats.log_reads(now_ms, self._settings.reads_log_interval_ms)
        return now_ms + self._settings.poll_interval_ms

    async def _fire_step(self, now_ms: int) -> int:
        """Start a batch of what is due; returns when the earliest held row falls due."""
        if wait := self._batches.wait_ms(now_ms):
            return now_ms + wait
        if batch := self._pop_due(now_ms):
            self._batches.launch(self._fire(now_ms, batch), now_ms)
        return self._held[0][0] if self._held else now_ms + self._settings.poll_interval_ms

    async def _release(self, gates: QueueGates, now_ms: int) -> None:
        """Parked rows of queues that may dispatch again fire now (``queue_gates``)."""
        await gates.refresh({shard: st.epoch for shard, st in self._shards.items()}, now_ms)
        for entry in await gates.release(now_ms):
            if entry.shard in self._shards:
                self._push(now_ms, entry)

    @property
    def held(self) -> int:
        return len(self._held)

    async def _sync_ownership(self, owned: Mapping[int, int]) -> None:
        for shard in [s for s, st in self._shards.items() if owned.get(s) != st.epoch]:
            del self._shards[shard]
        for shard, epoch in owned.items():
            if shard not in self._shards and self._fenced.get(shard) != epoch:
                self._shards[shard] = ShardState.at(await self._store.get_cursor(shard), epoch)

    def _scan_due(self, st: ShardState, now_ms: int) -> bool:
        """Whether ``_scan`` would read anything: a new second entered the prefetch window (or
        a read stopped part-way), or a rescan or sweep is due."""
        s = self._settings
        return (
            st.scan_from[0] <= second_of(now_ms + s.prefetch_ms)
            or now_ms - st.last_rescan_ms >= s.rescan_interval_ms
            or now_ms - st.last_sweep_ms >= s.sweep_interval_ms
        )

    async def _scan(self, shard: int, now_ms: int) -> None:
        st = self._shards[shard]
        s = self._settings
        await self._sweep(shard, st, now_ms)
        # Never re-read what the sweep just read (a catch-up after downtime reads it once).
        start = max(st.scan_from, st.sweep_from)
        if now_ms - st.last_rescan_ms >= s.rescan_interval_ms:
            st.last_rescan_ms = now_ms
            await self._rescan(shard, st, now_ms, start)
        until = second_of(now_ms + s.prefetch_ms)
        if start[0] > until:
            return  # nothing new entered the prefetch window
        end = await self._read(shard, st, start, until)
        st.scan_from = max(st.scan_from, (until + 1, "") if end is None else end)

    async def _rescan(
        self, shard: int, st: ShardState, now_ms: int, forward: tuple[int, str]
    ) -> None:
        """Read again from the last second up to one rescan interval ahead, for rows created
        after their second was read. Not the whole prefetch window (nor the lead: three times
        the rows re-read, measured): a row created due later in it is read by a later rescan,
        before it is due (the forward scan reads past ``forward``); it goes out once read."""
        start = (max(st.swept + 1, second_of(now_ms) - 1), "")
        horizon = second_of(now_ms + self._settings.rescan_interval_ms)
        if start < forward:
            await self._read(shard, st, start, min(horizon, forward[0]), unsent=True)

    async def _sweep(self, shard: int, st: ShardState, now_ms: int) -> None:
        """Read the seconds whose grace period has passed since the last sweep."""
        s = self._settings
        target = (now_ms - s.late_write_grace_s * 1000) // 1000 - 1
        if target <= st.swept or now_ms - st.last_sweep_ms < s.sweep_interval_ms:
            return
        st.last_sweep_ms = now_ms
        end = await self._read(shard, st, st.sweep_from, target, unsent=True)
        if end is None:
            st.swept, st.sweep_from = target, (target + 1, "")
        else:
            st.swept, st.sweep_from = max(st.swept, end[0] - 1), end

    async def _read(
        self, shard: int, st: ShardState, start: tuple[int, str], until: int, unsent: bool = False
    ) -> tuple[int, str] | None:
        """Hold every row after ``start`` up to second ``until``, page by page. Returns None
        when all were read, or the position reached when the held rows hit their limit."""
        s = self._settings
        while len(self._held) < s.max_held:
            rows = await self._store.read_due(shard, start, until, s.scan_limit, unsent_only=unsent)
            self.stats.store_reads += 1
            self.stats.rows_read += len(rows)
            self._telemetry.store_read(len(rows))
            for row in rows:
                self._hold(st, row)
            if len(rows) < s.scan_limit:
                return None
            start = rows[-1].position
        return start

    def _hold(self, st: ShardState, row: DueEntry) -> None:
        key = row_key(row)
        if key in st.seen or row.second <= st.cursor:
            return
        st.seen[key] = row.second
        if row.handed_off:
            self.stats.handed_off_skipped += 1
            return
        st.unacked[key] = row.second
        self._push(row.goes_out_ms(self._settings.lead_ms), row)

    def _push(self, fire_at_ms: int, entry: DueEntry) -> None:
        heapq.heappush(self._held, (fire_at_ms, next(self._seq), entry))
        if self._held[0][0] == fire_at_ms:  # the earliest now: the fire loop may sleep past it
            self._fire_wakeup.set()

    def _pop_due(self, now_ms: int) -> list[DueEntry]:
        """The held rows going out by ``now_ms`` and, with a lead, within the fire window."""
        batch: list[DueEntry] = []
        while self._held and self._held[0][0] <= now_ms + self._window_ms:
            _, _, entry = heapq.heappop(self._held)
            st = self._shards.get(entry.shard)
            gated = self.gates is not None and self.gates.is_released(entry)
            if st is not None and (row_key(entry) in st.unacked or gated):
                batch.append(entry)
        return batch

    async def _fire(self, now_ms: int, popped: list[DueEntry] | None = None) -> None:
        batch = self._pop_due(now_ms) if popped is None else popped
        ticks = [e for e in batch if e.is_tick]
        if ticks:
            batch = [e for e in batch if not e.is_tick]
            # Many schedules due at once: step a slice, publish it, and come back at once for
            # the rest, so the first occurrences go out without waiting for the last.
            later = ticks[self._settings.max_steps :]
            try:
                await self._step_schedules(ticks[: self._settings.max_steps], now_ms)
            except BackendUnavailable:
                self._hold_again([*ticks, *batch], now_ms)
                raise
            # Stepping many schedules takes time: stamp what goes out with the real instant.
            now_ms = max(now_ms, self._clock.now_ms())
            more = self._pop_due(now_ms)  # the occurrences just created, and ticks due again
            batch += [e for e in more if not e.is_tick]
            self._hold_again([*later, *(e for e in more if e.is_tick)], now_ms)
        deadlines = [e for e in batch if e.is_start_deadline]
        if deadlines:
            batch = [e for e in batch if not e.is_start_deadline]
            await self._expire(deadlines, [e.guarded_attempt() for e in deadlines], now_ms)
        if batch:
            await self._dispatch(batch, now_ms)

    async def _expire(self, rows: list[DueEntry], attempts: list[DueEntry], now_ms: int) -> None:
        """Expire the ``attempts`` whose start deadline ``rows`` came due (or that were
        claimed after their deadline had passed): see ``tikk.start_expiry``."""
        if self._expiry is None:
            log.warning("%d start deadline(s) due but no expiry configured", len(rows))
        else:
            try:
                for attempt in attempts:
                    if await self._expiry.expire(attempt, now_ms) is not None:
                        self.stats.expired += 1
            except BackendUnavailable:
                self._hold_again(rows, now_ms)
                raise
        self._settle(rows)

    async def _dispatch(self, batch: list[DueEntry], now_ms: int) -> None:
        """Claim the rows in the store, then publish them queue by queue. Rows of a queue
        that is backing off after a failure wait for its next try, unclaimed."""
        waiting = [e for e in batch if now_ms < self._backoff.until(e.queue)]
        for entry in waiting:
            self._hold_again([entry], self._backoff.until(entry.queue))
        batch = [e for e in batch if now_ms >= self._backoff.until(e.queue)]
        if self.gates is not None and batch:
            batch = await self._admit(self.gates, batch, now_ms)
        if not batch:
            return
        try:
            claimed = await self._store.mark_dispatched(batch, now_ms)
        except BackendUnavailable:
            self._hold_again(batch, now_ms)
            raise
        ready_keys = {row_key(e) for e in claimed.entries}
        self._settle([e for e in batch if row_key(e) not in ready_keys])
        self._forget(claimed.unfinished)
        self.stats.skipped += len(batch) - len(claimed.entries)
        self.stats.resent += claimed.resent
        self._telemetry.resent(claimed.resent)
        # Claimed after their start timeout ran out (a catch-up after downtime): nothing may
        # start them any more, so they are expired here rather than published.
        overdue = [e for e in claimed.entries if self._expiry and _past_start_deadline(e, now_ms)]
        if overdue:
            await self._expire(overdue, overdue, now_ms)
        by_queue: dict[str, list[DueEntry]] = defaultdict(list)
        for entry in claimed.entries:
            if entry not in overdue:
                by_queue[entry.queue].append(entry)
        outcomes = await asyncio.gather(
            *(self._publish(entries, now_ms) for entries in by_queue.values())
        )
        sent = [e for entries, ok in zip(by_queue.values(), outcomes, strict=True) if ok
                for e in entries]  # fmt: skip
        if sent:
            await self._record_handed_off(sent, now_ms)

    async def _publish(self, entries: list[DueEntry], now_ms: int) -> bool:
        """Publish one queue's rows; on failure hold them for that queue's next try."""
        queue = entries[0].queue
        try:
            with self._telemetry.dispatching([Delivery(e, now_ms) for e in entries]) as traced:
                keys = self._keys
                signed = traced if keys is None else [keys.signed(d) for d in traced]
                async with asyncio.timeout(self._settings.publish_timeout_ms / 1000):
                    await self._queue.publish(signed)
        except (TimeoutError, BackendUnavailable) as exc:
            timeout = f"not confirmed within {self._settings.publish_timeout_ms} ms"
            failure = exc if isinstance(exc, BackendUnavailable) else BackendUnavailable(timeout)
            self._queue_failed(queue, entries, now_ms, failure)
            return False
        self._backoff.succeeded(queue)
        self._settle(entries)
        self.stats.published += len(entries)
        if self._keep_samples:
            self.stats.lateness_ms.extend(now_ms - e.due_ms for e in entries)
            del self.stats.lateness_ms[: -self._keep_samples]
        return True

    def _queue_failed(
        self, queue: str, entries: list[DueEntry], now_ms: int, exc: BackendUnavailable
    ) -> None:
        failures, delay = self._backoff.failed(queue, now_ms)
        self.stats.publish_failures += 1
        log.warning(
            "queue %r refused %d deliveries (failure %d, next try in %d ms): %s",
            queue, len(entries), failures, delay, exc, extra={"queue": queue},
        )  # fmt: skip
        self._hold_again(entries, now_ms + delay)

    async def _record_handed_off(self, entries: list[DueEntry], now_ms: int) -> None:
        """Best effort: a new owner then skips these rows instead of sending them again."""
        try:
            await self._store.mark_handed_off(entries, now_ms)
        except BackendUnavailable as exc:
            log.info("recording %d hand-offs failed (%s); a takeover may resend them",
                     len(entries), exc)  # fmt: skip

    def _hold_again(self, entries: list[DueEntry], fire_at_ms: int) -> None:
        """Put popped rows back: they are still unacknowledged and must go out later."""
        for entry in entries:
            self._push(max(entry.goes_out_ms(self._settings.lead_ms), fire_at_ms), entry)

    async def _admit(self, gates: QueueGates, batch: list[DueEntry], now_ms: int) -> list[DueEntry]:
        """The rows that may go out now; the rest were parked and no longer hold the cursor."""
        try:
            go, parked = await gates.admit(batch, now_ms)
        except BackendUnavailable:
            self._hold_again(batch, now_ms)
            raise
        self._settle(parked)
        return go

    def _settle(self, entries: list[DueEntry]) -> None:
        """These rows need nothing more from this owner: they no longer hold the cursor."""
        if self.gates is not None:
            self.gates.finished(entries)
        for entry in entries:
            st = self._shards.get(entry.shard)
            if st is not None:
                st.unacked.pop(row_key(entry), None)

    def _forget(self, entries: list[DueEntry]) -> None:
        """Rows whose task was not ready to fire (its create unfinished): the next read of
        their second holds them again. They do not hold the cursor: a create finished after
        the sweep passed its row is re-placed by the server that finished it."""
        if self.gates is not None:
            self.gates.finished(entries)
        for entry in entries:
            st = self._shards.get(entry.shard)
            if st is not None:
                st.seen.pop(row_key(entry), None)

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
        self._settle(ticks)
        self.stats.schedule_steps += len(ticks)

    async def _flush_cursors(self, now_ms: int, force: bool = False) -> None:
        for st in self._shards.values():
            st.advance()
        if not force and now_ms - self._last_flush_ms < self._settings.cursor_flush_interval_ms:
            return
        if self._telemetry.metering:
            gauges = shard_gauges(self._shards, now_ms)
            self._telemetry.report_shards(gauges, self._store.shard_count)
        if await write_cursors(self._store, self._shards, self._fenced):
            self._last_flush_ms = now_ms
