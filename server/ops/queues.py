"""The ready queues as an operator sees and steers them, independent of gRPC: ``QueueOps``.

A queue's listing joins what waits in the ready queue (``ReadyQueue.backlog``) with what an
operator set on it (``tikk.queue_holds.QueueControl``) and how many of its due tasks the
dispatchers hold back now (parked rows, counted to a bound). Pausing, resuming and rate
limits are written to the queue-hold store, which every dispatcher reads about once a
second (``dispatcher.queue_gates`` applies them).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tikk.clock import Clock
from tikk.errors import InvalidArgument
from tikk.model import Page
from tikk.paging import decode_token, encode_token
from tikk.queue_holds import QueueControl
from tikk.ready_queue import QueueBacklog, ReadyQueue, with_idle
from tikk.store.queue_holds import QueueHoldStore

# Held rows are counted this far: the listing may hold millions, and the count is read
# on every queue listing.
HELD_COUNT_MOST = 10_000


@dataclass(frozen=True)
class QueueView:
    """One queue in a listing."""

    backlog: QueueBacklog
    control: QueueControl
    # Rows held now, counted up to HELD_COUNT_MOST (+1 when there are more).
    held: int


@dataclass(frozen=True)
class QueueChange:
    """An operator's change to a queue; None leaves that setting as it is."""

    paused: bool | None = None
    rate_per_s: float | None = None
    skip_older_than_ms: int | None = None


class QueueOps:
    """Lists the queues with their settings; pauses, resumes and rate-limits them."""

    def __init__(self, queue: ReadyQueue, holds: QueueHoldStore, clock: Clock) -> None:
        self._queue = queue
        self._holds = holds
        self._clock = clock

    async def queues(self, size: int, token: str) -> Page[QueueView]:
        """Every queue with tasks waiting or settings of its own, by name, a page at a time."""
        parts = decode_token(token, (str,))
        after = str(parts[0]) if parts else ""
        controls = await self._holds.controls()
        found = {b.queue: b for b in await self._queue.backlog()}
        listed = [b for b in with_idle(found, controls) if b.queue > after]
        page = [await self._view(b, controls.get(b.queue)) for b in listed[:size]]
        more = len(listed) > size
        return Page(page, encode_token(page[-1].backlog.queue) if more else "")

    async def update(self, queue: str, change: QueueChange) -> QueueView:
        """Apply ``change`` to ``queue``'s settings; the queue as it stands after."""
        controls = await self._holds.controls()
        now = self._clock.now_ms()
        control = _changed(controls.get(queue) or QueueControl(queue), change, now)
        await self._holds.set_control(control)
        found = {b.queue: b for b in await self._queue.backlog()}
        return await self._view(found.get(queue) or QueueBacklog(queue, 0, None), control)

    async def _view(self, backlog: QueueBacklog, control: QueueControl | None) -> QueueView:
        if control is None:  # never paused nor limited: nothing of it is held
            return QueueView(backlog, QueueControl(backlog.queue), 0)
        held = await self._holds.count_parked(backlog.queue, HELD_COUNT_MOST + 1)
        return QueueView(backlog, control, held)


def _changed(control: QueueControl, change: QueueChange, now_ms: int) -> QueueControl:
    """``control`` with ``change`` applied at ``now_ms``."""
    if change == QueueChange():
        raise InvalidArgument(
            "name", "nothing to change: set paused, max_per_second or skip_older_than"
        )
    new = replace(control, updated_ms=now_ms)
    if change.paused is not None:
        pausing = change.paused and not control.paused
        new = replace(new, paused=change.paused, paused_ms=now_ms if pausing else new.paused_ms)
    if change.rate_per_s is not None:
        new = replace(new, rate_per_s=change.rate_per_s)
    if change.skip_older_than_ms is not None:
        new = replace(new, skip_older_than_ms=change.skip_older_than_ms)
    return new
