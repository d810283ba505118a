"""Coalescing of concurrent requests into batch writes.

Results reach the server one message at a time, from many worker streams; writing each on
its own costs a round trip and an event-loop wake-up per row. A ``Coalescer`` sends what
arrives while its previous batches are being written as the next batch: a lone item is
written at once (no timer, no added latency), and under load batches grow by themselves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")


class Coalescer(Generic[Item]):
    """``submit`` returns when ``write`` stored a batch holding the item, or raises what that
    ``write`` raised (for every item of the batch)."""

    def __init__(
        self,
        write: Callable[[Sequence[Item]], Awaitable[None]],
        *,
        max_items: int = 512,
        in_flight: int = 2,
    ) -> None:
        self._write = write
        self._max_items = max_items
        self._slots = in_flight
        self._waiting: list[tuple[Item, asyncio.Future[None]]] = []
        self._drains: set[asyncio.Task[None]] = set()

    async def submit(self, item: Item) -> None:
        done = asyncio.get_running_loop().create_future()
        self._waiting.append((item, done))
        if self._slots:
            self._slots -= 1
            drain = asyncio.create_task(self._drain())
            self._drains.add(drain)
            drain.add_done_callback(self._drains.discard)
        await done

    async def _drain(self) -> None:
        """Write batches until nothing waits, then give the slot back."""
        try:
            while self._waiting:
                batch = self._waiting[: self._max_items]
                del self._waiting[: self._max_items]
                await self._write_batch(batch)
        finally:
            self._slots += 1

    async def _write_batch(self, batch: list[tuple[Item, asyncio.Future[None]]]) -> None:
        try:
            await self._write([item for item, _ in batch])
        except BaseException as exc:
            failure = exc if isinstance(exc, Exception) else RuntimeError("batch write stopped")
            for _, done in batch:
                if not done.done():
                    done.set_exception(failure)
            if not isinstance(exc, Exception):
                raise
            return
        for _, done in batch:
            if not done.done():
                done.set_result(None)
