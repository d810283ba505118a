"""Paused and rate-limited queues (``tikk.queue_holds``), as the dispatcher applies them.

A row due in a queue that is paused, over its rate, or behind parked rows of its own shard
is *parked* (``QueueHoldStore.park``) instead of published: the dispatcher then settles it,
so its cursor moves on and memory stays bounded however long the pause. Parked rows are
*released* by the shard's owner once the queue may dispatch: each owned shard of the queue
is a lane read a page at a time in due order, and the lanes are merged, so rows go out in
due order across the owned shards, at the queue's rate (its share for the shards owned
here) or, for a queue without one, at ``DispatchSettings.release_per_s``. A released row
keeps its due time: its lateness is the time it was held. One older than the queue's
``skip_older_than_ms`` is skipped instead (its task CANCELLED with error type ``Skipped``).
A released row is removed from its lane once the dispatcher is done with it (published,
or found stale); an owner that dies first leaves it for the next owner, who claims it as
any row (at-least-once).
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from dispatcher.shard_state import NEVER, RowKey, row_key
from tikk.errors import BackendUnavailable
from tikk.model import DueEntry
from tikk.queue_holds import QueueControl
from tikk.settings import DispatchSettings
from tikk.store.queue_holds import FIRST, ParkedPosition, QueueHoldStore, parked_position

log = logging.getLogger("tikk.dispatcher")

_LANE_PAGE = 100
# Releases are looked for at most this often: ticks come a thousand a second under load, and
# each pass walks every owned lane of every resumed queue.
_RELEASE_EVERY_MS = 50
_TOP = "\U0010ffff"


@dataclass
class _Lane:
    """One queue's parked rows in one owned shard: where the reads reached, what was read
    and not yet released, and whether the reads found the end."""

    queue: str
    shard: int
    position: ParkedPosition = FIRST
    buffer: list[DueEntry] = field(default_factory=list)
    drained: bool = False

    @property
    def backlog(self) -> bool:
        return bool(self.buffer) or not self.drained

    def parked(self, e: DueEntry) -> None:
        """A row parked in (or given back to) this lane: read it in its turn."""
        self.drained = False
        if parked_position(e) <= self.position:
            # Behind the reads (a row held back by a failing queue): read again from the
            # earlier of it and the first row buffered, so that read gives back every row
            # the buffer held (those before the row as well as those after it).
            first = min([e, *self.buffer[:1]], key=parked_position)
            self.buffer.clear()
            self.position = (first.due_ms - 1, _TOP)


@dataclass
class _Bucket:
    rate_per_s: float
    tokens: float = 0.0
    at_ms: int = NEVER

    def take(self, now_ms: int) -> bool:
        """One token if there is one. The bucket holds a tenth of a second's worth (at
        least one), so a release is spread over the ticks rather than sent in a burst."""
        burst = max(1.0, self.rate_per_s / 10)
        if self.at_ms == NEVER:
            self.tokens = burst
        else:
            self.tokens = min(burst, self.tokens + (now_ms - self.at_ms) * self.rate_per_s / 1000)
        self.at_ms = now_ms
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


class QueueGates:
    """Which due rows go out now and which are parked; the release of parked rows."""

    def __init__(self, holds: QueueHoldStore, shard_count: int, settings: DispatchSettings) -> None:
        self._holds = holds
        self._shard_count = shard_count
        self._settings = settings
        self._controls: dict[str, QueueControl] = {}
        self._loaded_ms = NEVER
        self._epochs: dict[int, int] = {}
        self._owned: list[int] = []
        self._lanes: dict[tuple[str, int], _Lane] = {}
        self._buckets: dict[str, _Bucket] = {}
        # Rows released and not yet finished, with their shard.
        self._released: dict[RowKey, int] = {}
        self._done: list[DueEntry] = []
        self._release_ms = NEVER
        # The dispatcher parks rows in its fire batches while its read loop releases: a
        # lane's read must not answer over a row parked while it was in flight (it would
        # mark the lane drained with that row unread), so the two take turns.
        self._lanes_lock = asyncio.Lock()
        self.parked = 0
        self.released = 0
        self.skipped = 0

    def is_released(self, e: DueEntry) -> bool:
        return row_key(e) in self._released

    async def refresh(self, owned: Mapping[int, int], now_ms: int) -> None:
        """Follow the owned shards (shard → epoch); read the controls again when due. What
        is known of a shard lost, or lost and regained (a new epoch), is forgotten: its
        lanes are read again from their start, released rows included."""
        if owned != self._epochs:
            kept = {s for s, epoch in owned.items() if self._epochs.get(s) == epoch}
            self._epochs = dict(owned)
            self._owned = sorted(owned)
            self._lanes = {k: v for k, v in self._lanes.items() if k[1] in kept}
            self._released = {k: s for k, s in self._released.items() if s in kept}
            self._buckets.clear()  # a queue's rate here is its share for the shards owned
        if now_ms - self._loaded_ms >= self._settings.queue_control_refresh_ms:
            self._controls = await self._holds.controls()
            self._loaded_ms = now_ms

    async def admit(
        self, batch: Sequence[DueEntry], now_ms: int
    ) -> tuple[list[DueEntry], list[DueEntry]]:
        """The rows of ``batch`` that may be published now, and those parked instead
        (written before this returns, so the caller may settle them)."""
        go = [e for e in batch if e.queue not in self._controls]
        held = [e for e in batch if e.queue in self._controls]
        park: list[DueEntry] = []
        if held:
            # Decided under the lock the releases take: a release reading the lanes meanwhile
            # could release a row decided here to be parked, and the caller, settling it as
            # parked, would finish that release (its row unparked, never published).
            async with self._lanes_lock:
                for e in held:
                    (go if self._may_go(e, now_ms) else park).append(e)
                if park:
                    await self._holds.park(park)
                    for e in park:
                        self._lane(e.queue, e.shard).parked(e)
            self.parked += len(park)
        return go, park

    def _may_go(self, e: DueEntry, now_ms: int) -> bool:
        control = self._controls.get(e.queue)
        if control is None or self.is_released(e):
            return True
        lane = self._lanes.get((e.queue, e.shard))
        if control.paused or (lane is not None and lane.backlog):
            return False  # behind the rows parked before it (a lane not read yet: none known)
        return control.rate_per_s == 0 or self._bucket(control).take(now_ms)

    def finished(self, entries: Iterable[DueEntry]) -> None:
        """The dispatcher is done with these rows: released ones leave their lanes."""
        for e in entries:
            if self._released.pop(row_key(e), None) is not None:
                self._done.append(e)

    async def release(self, now_ms: int) -> list[DueEntry]:
        """Parked rows to publish now, in due order per queue (those too old are skipped
        instead); and the rows finished since the last call leave their lanes."""
        if self._done:
            done, self._done = self._done, []
            try:
                await self._holds.unpark(done)
            except BackendUnavailable:
                self._done += done
                raise
        if now_ms - self._release_ms < _RELEASE_EVERY_MS:
            return []
        self._release_ms = now_ms
        out: list[DueEntry] = []
        async with self._lanes_lock:
            for control in list(self._controls.values()):
                if not control.paused:
                    out += await self._release_queue(control, now_ms)
        return out

    async def _release_queue(self, control: QueueControl, now_ms: int) -> list[DueEntry]:
        lanes = [self._lane(control.queue, s) for s in self._owned]
        lanes = [lane for lane in lanes if lane.backlog]
        if not lanes:
            return []
        await asyncio.gather(*(self._fill(lane) for lane in lanes if not lane.buffer))
        out, old = self._merge(lanes, control, now_ms)
        self._released.update((row_key(e), e.shard) for e in out)
        self.released += len(out)
        if old:
            await self._skip(control, old, now_ms)
        return out

    def _merge(
        self, lanes: list[_Lane], control: QueueControl, now_ms: int
    ) -> tuple[list[DueEntry], list[DueEntry]]:
        """Take the lanes' rows in due order while tokens last: (to publish, too old)."""
        heads = [(lane.buffer[0].due_ms, i) for i, lane in enumerate(lanes) if lane.buffer]
        heapq.heapify(heads)
        bucket = self._bucket(control)
        out: list[DueEntry] = []
        old: list[DueEntry] = []
        while heads:
            lane = lanes[heads[0][1]]
            e = lane.buffer[0]
            too_old = control.too_old(e.due_ms, now_ms)
            if not too_old and not bucket.take(now_ms):
                break
            (old if too_old else out).append(e)
            del lane.buffer[0]
            if lane.buffer:
                heapq.heapreplace(heads, (lane.buffer[0].due_ms, heads[0][1]))
            elif lane.drained:
                heapq.heappop(heads)
            else:
                break  # its next page may hold rows due before the other lanes' heads
        return out, old

    async def _fill(self, lane: _Lane) -> None:
        rows = await self._holds.read_parked(lane.queue, lane.shard, lane.position, _LANE_PAGE)
        lane.drained = len(rows) < _LANE_PAGE
        if rows:
            lane.position = parked_position(rows[-1])
        lane.buffer = [e for e in rows if not self.is_released(e)]

    async def _skip(self, control: QueueControl, old: list[DueEntry], now_ms: int) -> None:
        limit_s = control.skip_older_than_ms / 1000
        reason = (f"waited in held queue {control.queue!r} longer than its limit of "
                  f"{limit_s:g} s; skipped when released")  # fmt: skip
        try:
            skipped = await self._holds.skip(old, reason, now_ms)
            await self._holds.unpark(old)
        except BackendUnavailable:
            for e in old:  # read again by the next release
                self._lane(e.queue, e.shard).parked(e)
            raise
        self.skipped += len(skipped)
        log.info("queue %r: %d held task(s) skipped as older than %g s",
                 control.queue, len(skipped), limit_s, extra={"queue": control.queue})  # fmt: skip

    def _lane(self, queue: str, shard: int) -> _Lane:
        lane = self._lanes.get((queue, shard))
        if lane is None:
            lane = self._lanes[(queue, shard)] = _Lane(queue, shard)
        return lane

    def _bucket(self, control: QueueControl) -> _Bucket:
        """The queue's tokens here: its rate's share for the shards owned, or, for a queue
        without a rate, ``release_per_s`` (which only releases draw on)."""
        share = len(self._owned) / self._shard_count
        rate = control.rate_per_s * share if control.rate_per_s else self._settings.release_per_s
        bucket = self._buckets.get(control.queue)
        if bucket is None or bucket.rate_per_s != rate:
            bucket = self._buckets[control.queue] = _Bucket(rate)
        return bucket
