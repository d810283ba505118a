"""How the dispatcher's two loops are paced: each runs one step, then sleeps until the instant
the step named, until it is woken, or until the process stops.

The dispatcher reads and fires in separate loops (``Dispatcher.run``) because their costs
differ by orders of magnitude on a replicated store: a read of a shard's slice, a rescan or a
cursor write takes tens of milliseconds at ``LOCAL_QUORUM`` on three busy nodes, and a pass
over every owned shard several of those, while a row already held in memory needs only its
claim and its publish. In one loop every due row waited for the slowest read of the pass.

The fire loop does not wait long for a batch either (``FireBatches``): a batch's claim, publish
and hand-off mark are four round trips in turn, each of them tens of milliseconds on such a
store, and rows falling due meanwhile would queue behind it. Tasks have no order within a
queue, so a batch slower than a few milliseconds is overlapped by the next, a few at most.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from tikk.clock import Clock
from tikk.errors import BackendUnavailable

log = logging.getLogger("tikk.dispatcher")

# Fire batches at once: enough to cover a claim's and a publish's round trips at a few hundred
# fires a second, few enough that a store in trouble is not flooded with claims.
FIRE_BATCHES_IN_FLIGHT = 4
# How long a batch in flight holds the next back (``FireBatches``).
FIRE_PATIENCE_MS = 20
# Rows going out within this of the earliest go with it, when the lead (``lead_ms``) covers
# it: the worker holds an early delivery until due, so going out a little earlier costs
# nothing, and at 1,000 fires/s a batch then carries about fifty rows, not a few: fewer
# claims, publishes and hand-off marks (each a round trip) for the same rows.
FIRE_WINDOW_MS = 50

# One step at instant ``now_ms``; returns the instant of the next.
Step = Callable[[int], Awaitable[int]]


class Wakeup:
    """Wakes a sleeping loop early: when a row is held that falls due before the loop's next
    step, and when the process stops (so a sleeper needs to wait on one thing only)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def set(self) -> None:
        self._event.set()

    async def sleep(self, seconds: float) -> None:
        """Up to ``seconds``, or until ``set``; clears the wake-up either way."""
        if seconds > 0 and not self._event.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._event.wait(), seconds)
        self._event.clear()


class FireBatches:
    """Fire batches in flight at once, at most ``most``. A new batch waits while the youngest
    in flight is younger than ``patience_ms``: rows falling due meanwhile then go out together
    when it ends (``on_done`` wakes the fire loop) or once it turns out slow. On a store that
    answers within that (one node: a few ms) batches stay as large, and requests as few, as
    when one tick fired at a time; on one that does not (three busy replicas) they overlap.
    A batch that fails with ``BackendUnavailable`` (its rows were held again) pauses new
    batches for ``backoff_ms``, so a store or queue that is down is not asked again at every
    wake-up."""

    def __init__(
        self,
        backoff_ms: int,
        on_done: Callable[[], None],
        most: int = FIRE_BATCHES_IN_FLIGHT,
        patience_ms: int = FIRE_PATIENCE_MS,
    ) -> None:
        self._most, self._backoff_ms, self._patience_ms = most, backoff_ms, patience_ms
        self._on_done = on_done
        self._running: dict[asyncio.Task[None], int] = {}  # batch → the instant it began
        self._paused_until = 0

    def wait_ms(self, now_ms: int) -> int:
        """How long before a new batch may begin (0: now). Any failure but a backend's, of a
        batch that ended, is raised here."""
        for task in [t for t in self._running if t.done()]:
            del self._running[task]
            task.result()
        if now_ms < self._paused_until:
            return self._paused_until - now_ms
        if not self._running:
            return 0
        if len(self._running) >= self._most:
            return self._patience_ms  # or sooner: a batch's end wakes the loop
        return max(0, max(self._running.values()) + self._patience_ms - now_ms)

    def launch(self, batch: Awaitable[None], now_ms: int) -> None:
        task = asyncio.create_task(self._guarded(batch, now_ms))
        task.add_done_callback(lambda _: self._on_done())
        self._running[task] = now_ms

    async def _guarded(self, batch: Awaitable[None], now_ms: int) -> None:
        try:
            await batch
        except BackendUnavailable as exc:
            log.warning("dispatch fire failed, retrying: %s", exc)
            self._paused_until = max(self._paused_until, now_ms + self._backoff_ms)

    async def drain(self) -> None:
        """Wait for every batch in flight (at a stop, before the cursors are written)."""
        while self._running:
            running, self._running = list(self._running), {}
            for task in await asyncio.gather(*running, return_exceptions=True):
                if isinstance(task, BaseException):
                    raise task


async def paced(
    step: Step,
    *,
    name: str,
    clock: Clock,
    stop: asyncio.Event,
    wakeup: Wakeup,
    error_backoff_ms: int,
) -> None:
    """Run ``step`` until ``stop`` is set. A step that fails with ``BackendUnavailable`` is
    logged and tried again after ``error_backoff_ms``, whatever wakes the loop meanwhile (rows
    held again after a failed claim would otherwise wake it at once, against a store that
    is down)."""
    while not stop.is_set():
        now = clock.now_ms()
        try:
            wake = await step(now)
        except BackendUnavailable as exc:
            log.warning("dispatch %s failed, retrying: %s", name, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), error_backoff_ms / 1000)
            continue
        await wakeup.sleep(max(0, wake - clock.now_ms()) / 1000)


async def run_loops(
    read: Step,
    fire: Step,
    *,
    fire_wakeup: Wakeup,
    clock: Clock,
    stop: asyncio.Event,
    error_backoff_ms: int,
) -> None:
    """The read loop and the fire loop side by side until ``stop`` is set; a failure other
    than ``BackendUnavailable`` in either ends both."""
    reads = Wakeup()

    async def loop(name: str, step: Step, wakeup: Wakeup) -> None:
        await paced(
            step,
            name=name,
            clock=clock,
            stop=stop,
            wakeup=wakeup,
            error_backoff_ms=error_backoff_ms,
        )

    async def wake_on_stop() -> None:  # so no loop sleeps out its interval after the stop
        await stop.wait()
        reads.set()
        fire_wakeup.set()

    async with asyncio.TaskGroup() as loops:
        loops.create_task(wake_on_stop())
        loops.create_task(loop("read", read, reads))
        loops.create_task(loop("fire", fire, fire_wakeup))
