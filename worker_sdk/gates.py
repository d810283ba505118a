"""Per-handler limits on a Worker (``HandlerOptions``): runs at once per handler and per label
value, and starts per second. ``HandlerGates.admit`` waits until a run may start; the Worker
counts a waiting run out of its handler slots (``InFlight.waiting``), so a handler held by its
own limits never holds back another.

The rate spaces starts evenly (one every ``1 / rate_per_s`` seconds, no burst): a start
reserves its instant before it sleeps, so runs waiting together are spaced, not released at
once. A run takes its concurrency places first and its start instant last, so a run that waits
for a place does not use up a start it cannot make. Places per label value are made on first
use and dropped when the last run holding one ends, so the label values seen do not pile up.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

from worker_sdk.handlers import HandlerSpec


class _Places:
    """A semaphore with a count of its users, so it can be dropped when none is left."""

    def __init__(self, most: int) -> None:
        self.semaphore = asyncio.Semaphore(most)
        self.users = 0


class HandlerGates:
    """The limits of every handler of one Worker. ``clock`` (monotonic seconds) and ``sleep``
    time the rate."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._clock = clock
        self._sleep = sleep
        self._places: dict[tuple[str, ...], _Places] = {}
        self._next_start: dict[str, float] = {}

    @contextlib.asynccontextmanager
    async def admit(self, spec: HandlerSpec, labels: Mapping[str, str]) -> AsyncIterator[None]:
        """Wait until a run of ``spec`` with ``labels`` may start, and hold its places while
        the block runs."""
        options = spec.options
        keys: list[tuple[tuple[str, ...], int]] = []
        if options.concurrency:
            keys.append(((spec.name,), options.concurrency))
        for label, most in sorted(options.concurrency_per_label.items()):
            if label in labels:
                keys.append(((spec.name, label, labels[label]), most))
        async with contextlib.AsyncExitStack() as stack:
            for key, most in keys:  # always in this order: two runs cannot wait on each other
                await stack.enter_async_context(self._hold(key, most))
            if options.rate_per_s:
                await self._start_slot(spec.name, options.rate_per_s)
            yield

    @contextlib.asynccontextmanager
    async def _hold(self, key: tuple[str, ...], most: int) -> AsyncIterator[None]:
        places = self._places.get(key)
        if places is None:
            places = self._places[key] = _Places(most)
        places.users += 1
        try:
            async with places.semaphore:
                yield
        finally:
            places.users -= 1
            if places.users == 0:
                del self._places[key]

    async def _start_slot(self, name: str, rate_per_s: float) -> None:
        """Sleep until this start's instant, reserved before sleeping."""
        now = self._clock()
        at = max(now, self._next_start.get(name, now))
        self._next_start[name] = at + 1.0 / rate_per_s
        if at > now:
            await self._sleep(at - now)

    def holding(self) -> int:
        """How many concurrency places are in use or waited for (for tests and leaks)."""
        return sum(p.users for p in self._places.values())
